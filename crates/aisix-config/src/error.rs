//! Configuration errors: each names the key path, what is wrong, and where the value came from.

use std::fmt;
use std::path::PathBuf;

/// Where a configuration value came from, so an operator knows what to edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A YAML file.
    File(PathBuf),
    /// An environment variable, by name.
    Env(String),
    /// A document in etcd, by its full key.
    Etcd(String),
    /// No single place (a cross-field rule, or a built-in default).
    Unknown,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File(path) => write!(f, "in {}", path.display()),
            Origin::Env(var) => write!(f, "from {var}"),
            Origin::Etcd(key) => write!(f, "in etcd key {key}"),
            Origin::Unknown => Ok(()),
        }
    }
}

/// One thing wrong with the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Dotted key path (`proxy.workers`) or resource path (`models[2].provider_key`).
    pub path: String,
    /// What is wrong, never echoing a secret value.
    pub message: String,
    pub origin: Origin,
}

impl ConfigError {
    pub fn new(path: impl Into<String>, message: impl Into<String>, origin: Origin) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
            origin,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)?;
        } else {
            write!(f, "{}: {}", self.path, self.message)?;
        }
        match &self.origin {
            Origin::Unknown => Ok(()),
            origin => write!(f, " ({origin})"),
        }
    }
}

/// Every error found in one load, reported together.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    pub fn push(&mut self, error: ConfigError) {
        self.0.push(error);
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &ConfigError> {
        self.0.iter()
    }

    /// `Ok(value)` when nothing was recorded, else every recorded error.
    pub fn into_result<T>(self, value: T) -> Result<T, ConfigErrors> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(self)
        }
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}
