//! Every command and configuration in README.md and docs/ is exercised. YAML blocks go through
//! `aisix validate` (a block marked `<!-- refused: A | B -->` must fail with each message);
//! shell blocks marked `<!-- run -->` run against a live gateway serving the example config;
//! shell blocks marked `<!-- exercised by: NAME -->` name the test that covers them, which must
//! exist. A shell block with no marker, or a block in a language nothing checks, fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use aisix_e2e::gateway::{Gateway, binary};

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

/// A fenced code block with the HTML comment right above it, if any.
#[derive(Debug)]
struct Block {
    file: String,
    line: usize,
    language: String,
    marker: Option<String>,
    content: String,
}

/// The languages of blocks this test or another one checks.
const CHECKED: &[&str] = &["yaml", "sh", "promql"];

fn documents() -> Vec<PathBuf> {
    let mut files = vec![workspace().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(workspace().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

fn blocks() -> Vec<Block> {
    let mut blocks = Vec::new();
    for path in documents() {
        let text = std::fs::read_to_string(&path).unwrap();
        let file = path
            .strip_prefix(workspace())
            .unwrap()
            .display()
            .to_string();
        let lines: Vec<&str> = text.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            let Some(language) = lines[i].strip_prefix("```") else {
                i += 1;
                continue;
            };
            let marker = lines[..i]
                .iter()
                .rev()
                .find(|l| !l.trim().is_empty())
                .and_then(|l| l.trim().strip_prefix("<!--"))
                .and_then(|l| l.strip_suffix("-->"))
                .map(|l| l.trim().to_owned());
            let end = (i + 1..lines.len())
                .find(|&j| lines[j].starts_with("```"))
                .unwrap_or_else(|| panic!("{file}:{}: unterminated code block", i + 1));
            blocks.push(Block {
                file: file.clone(),
                line: i + 1,
                language: language.trim().to_owned(),
                marker,
                content: lines[i + 1..end].join("\n") + "\n",
            });
            i = end + 1;
        }
    }
    blocks
}

#[test]
fn every_code_block_is_in_a_checked_language() {
    for block in blocks() {
        assert!(
            CHECKED.contains(&block.language.as_str()),
            "{}:{}: a ```{} block is checked by nothing; use one of {CHECKED:?}",
            block.file,
            block.line,
            block.language
        );
    }
}

/// `aisix validate` on one YAML block, in a folder holding what the block refers to.
fn validate(block: &Block) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let document: serde_yaml::Value = serde_yaml::from_str(&block.content)
        .unwrap_or_else(|e| panic!("{}:{}: not YAML: {e}", block.file, block.line));
    let mut env: Vec<(String, String)> = Vec::new();
    let config = dir.path().join("config.yaml");
    if document.get("_format_version").is_some() {
        std::fs::write(dir.path().join("resources.yaml"), &block.content).unwrap();
        std::fs::write(&config, "resources_file: resources.yaml\n").unwrap();
        // Whatever the file reads from the environment: ${VAR} and key_env.
        for rest in block.content.split("${").skip(1) {
            env.push((
                rest.split('}').next().unwrap().to_owned(),
                "sk-doc-value".to_owned(),
            ));
        }
        for line in block.content.lines() {
            if let Some(var) = line.trim().strip_prefix("key_env:") {
                env.push((var.trim().to_owned(), "sk-doc-key".to_owned()));
            }
            // A service-account key file, as Google issues one (a vertex key reads it at load).
            if let Some(file) = line.trim().strip_prefix("credentials_file:") {
                let file = file.split('#').next().unwrap().trim();
                let key = serde_json::json!({"type": "service_account", "client_email": "doc@p.iam.gserviceaccount.com",
                    "private_key": "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n",
                    "token_uri": "https://oauth2.googleapis.com/token"});
                std::fs::write(dir.path().join(file), key.to_string()).unwrap();
            }
        }
    } else {
        std::fs::write(&config, &block.content).unwrap();
        if let Some(file) = document.get("resources_file").and_then(|v| v.as_str()) {
            std::fs::copy(
                workspace().join("resources.example.yaml"),
                dir.path().join(file),
            )
            .unwrap();
        }
        if let Some(tls) = document.get("proxy").and_then(|p| p.get("tls")) {
            let cert = dir.path().join(tls["cert_file"].as_str().unwrap());
            let key = dir.path().join(tls["key_file"].as_str().unwrap());
            std::fs::create_dir_all(cert.parent().unwrap()).unwrap();
            let (_, written_cert, written_key) =
                aisix_e2e::tls::self_signed(cert.parent().unwrap());
            std::fs::rename(written_cert, cert).unwrap();
            std::fs::create_dir_all(key.parent().unwrap()).unwrap();
            std::fs::rename(written_key, key).unwrap();
        }
    }
    let mut command = Command::new(binary());
    command.args(["validate", "--config"]).arg(&config);
    for (name, _) in std::env::vars() {
        if name.starts_with("AISIX_") {
            command.env_remove(name);
        }
    }
    command.envs(env).output().unwrap()
}

#[test]
fn every_yaml_block_is_accepted_by_validate_or_refused_with_the_error_shown() {
    let mut checked = 0;
    for block in blocks().iter().filter(|b| b.language == "yaml") {
        let out = validate(block);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let at = format!("{}:{}", block.file, block.line);
        match block
            .marker
            .as_deref()
            .and_then(|m| m.strip_prefix("refused:"))
        {
            Some(expected) => {
                assert!(
                    !out.status.success(),
                    "{at}: accepted, but the docs say it is refused"
                );
                for message in expected.split(" | ") {
                    assert!(
                        stderr.contains(message.trim()),
                        "{at}: no {message:?} in:\n{stderr}"
                    );
                }
            }
            None => assert!(out.status.success(), "{at}: refused:\n{stderr}"),
        }
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} YAML blocks found");
}

/// Every `fn name(` in the workspace's test and source files.
fn test_exists(name: &str) -> bool {
    if name == ".ci/run" {
        return workspace().join(".ci/run").is_file();
    }
    let needle = format!("fn {name}(");
    let mut folders = vec![workspace().join("e2e/tests")];
    for krate in std::fs::read_dir(workspace().join("crates")).unwrap() {
        let krate = krate.unwrap().path();
        folders.push(krate.join("tests"));
        folders.push(krate.join("src"));
    }
    folders
        .iter()
        .any(|folder| contains_in_rust_files(folder, &needle))
}

fn contains_in_rust_files(folder: &Path, needle: &str) -> bool {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return false;
    };
    entries.flatten().any(|entry| {
        let path = entry.path();
        if path.is_dir() {
            contains_in_rust_files(&path, needle)
        } else {
            path.extension().is_some_and(|e| e == "rs")
                && std::fs::read_to_string(&path).is_ok_and(|text| text.contains(needle))
        }
    })
}

#[test]
fn every_shell_block_runs_here_or_names_the_test_that_covers_it() {
    let blocks: Vec<Block> = blocks()
        .into_iter()
        .filter(|b| b.language == "sh")
        .collect();
    let mut to_run = Vec::new();
    for block in &blocks {
        let at = format!("{}:{}", block.file, block.line);
        match block.marker.as_deref() {
            Some("run") => to_run.push(block),
            Some(marker) if marker.starts_with("exercised by:") => {
                let name = marker["exercised by:".len()..].trim();
                assert!(test_exists(name), "{at}: no test named {name}");
            }
            _ => panic!("{at}: mark the block <!-- run --> or <!-- exercised by: TEST -->"),
        }
    }
    assert!(!to_run.is_empty());

    // A gateway serving the example config, as the README starts it.
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(binary());
    command
        .arg("--config")
        .arg(workspace().join("config.example.yaml"))
        .env("AISIX_PROXY__ADDR", "127.0.0.1:0")
        .env(
            "AISIX_OBSERVABILITY__METRICS__PROMETHEUS__ADDR",
            "127.0.0.1:0",
        );
    let mut gateway = Gateway::start_command(command, dir);
    let addr = gateway.addr().to_string();
    let pid = gateway.pid().to_string();
    for block in to_run {
        let script = block
            .content
            .replace("127.0.0.1:3000", &addr)
            .replace("\"$(pgrep -x aisix)\"", &pid)
            .replace("\"$(pidof aisix)\"", &pid);
        assert!(
            !script.contains("$("),
            "{}:{}: a command substitution this test cannot stand in for",
            block.file,
            block.line
        );
        let out = Command::new("bash")
            .args(["-euo", "pipefail", "-c"])
            .arg(&script)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}:{}: exited {}:\n{stdout}{}",
            block.file,
            block.line,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        if script.contains("curl") || script.contains("ps ") {
            assert!(
                !stdout.trim().is_empty(),
                "{}:{}: printed nothing",
                block.file,
                block.line
            );
        }
    }
    // The `kill -HUP` block reloaded; nothing stopped the gateway.
    assert!(
        gateway.wait_for_log("SIGHUP: resources reloaded", Duration::from_secs(10)),
        "{}",
        gateway.logs()
    );
    assert!(gateway.try_exit().is_none(), "{}", gateway.logs());
}
