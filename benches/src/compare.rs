//! `aisix-bench compare --rev <git-rev>`: a regression gate that travels. Builds the gateway of
//! another revision in a temporary git worktree (its own target folder, both removed after),
//! then runs the unary grid and the streaming leg of this tree's gateway and of that one in one
//! run, interleaved, and prints the ratios (`now/<rev>`). It never fails on a figure: a
//! revision that is `HEAD`, that git does not know, or that does not build is skipped with a
//! message and exit status 0, so CI can run it against the merge base and only report.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use crate::gateway;
use crate::grid::{self, GridArgs};
use crate::process;

#[derive(Debug, Clone, clap::Args)]
pub struct CompareArgs {
    /// The revision to compare with: anything `git rev-parse` takes (a commit, a branch,
    /// `HEAD~3`, `$(git merge-base HEAD origin/main)`).
    #[arg(long)]
    pub rev: String,
    /// Build the other revision with the dev profile instead of release (a cheap CI smoke;
    /// give `--aisix-bin target/debug/aisix` for this tree's side to match).
    #[arg(long)]
    pub debug: bool,
    #[command(flatten)]
    pub grid: GridArgs,
}

/// Runs the comparison, or explains why it is skipped.
pub fn run(args: CompareArgs) -> Result<()> {
    let root = gateway::workspace_root();
    let commit = match git(
        &root,
        &["rev-parse", "--verify", &format!("{}^{{commit}}", args.rev)],
    ) {
        Ok(commit) => commit,
        Err(error) => {
            eprintln!(
                "[bench] compare skipped: git does not know {:?}: {error:#}",
                args.rev
            );
            return Ok(());
        }
    };
    let head = git(&root, &["rev-parse", "HEAD"])?;
    let short: String = commit.chars().take(7).collect();
    if commit == head {
        eprintln!(
            "[bench] compare skipped: {} is HEAD ({short}); nothing to compare with",
            args.rev
        );
        return Ok(());
    }
    let scratch = Scratch::new(&root, &short)?;
    eprintln!(
        "[bench] compare: building {short} in {} (its own target folder)",
        scratch.tree.display()
    );
    let base = match scratch.build(&commit, args.debug) {
        Ok(bin) => bin,
        Err(error) => {
            eprintln!("[bench] compare skipped: {short} did not build: {error:#}");
            return Ok(());
        }
    };
    let mut grid = args.grid;
    grid.compare = Some((base, short.clone()));
    // It reports and never judges: a window that failed (an old revision that cannot read
    // today's generated config, say) is in the report's notes, and the exit status stays 0.
    if let Err(error) = grid::run(grid) {
        process::check_interrupted()?;
        eprintln!("[bench] compare with {short}: {error:#} (reported, not asserted)");
    }
    Ok(())
}

/// `git <args>` in `dir`: its trimmed standard output.
fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .context("run git")?;
    if !output.status.success() {
        bail!(
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// The temporary worktree and target folder of the other revision, removed on drop (also when
/// the run fails or is interrupted).
struct Scratch {
    root: PathBuf,
    tree: PathBuf,
    target: PathBuf,
}

impl Scratch {
    fn new(root: &Path, short: &str) -> Result<Scratch> {
        let base = std::env::temp_dir().join(format!(
            "aisix-bench-compare-{short}-{}",
            std::process::id()
        ));
        Ok(Scratch {
            root: root.to_path_buf(),
            tree: base.join("tree"),
            target: base.join("target"),
        })
    }

    /// Checks `commit` out and builds its gateway; the executable's path.
    fn build(&self, commit: &str, debug: bool) -> Result<PathBuf> {
        let tree = self.tree.to_string_lossy();
        git(&self.root, &["worktree", "add", "--detach", &tree, commit])?;
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut command = Command::new(cargo);
        command.args(["build", "-p", "aisix-server", "--bin", "aisix"]);
        if !debug {
            command.arg("--release");
        }
        let status = command
            .arg("--target-dir")
            .arg(&self.target)
            .current_dir(&self.tree)
            .stdin(Stdio::null())
            .status()
            .context("run cargo")?;
        if !status.success() {
            bail!("cargo build exited with {status}");
        }
        let bin = self
            .target
            .join(if debug { "debug" } else { "release" })
            .join("aisix");
        if !bin.is_file() {
            bail!("no executable at {}", bin.display());
        }
        Ok(bin)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let tree = self.tree.to_string_lossy().into_owned();
        let _ = git(&self.root, &["worktree", "remove", "--force", &tree]);
        let _ = git(&self.root, &["worktree", "prune"]);
        if let Some(base) = self.tree.parent() {
            let _ = std::fs::remove_dir_all(base);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        compare: CompareArgs,
    }

    fn args(rev: &str) -> CompareArgs {
        let out = std::env::temp_dir().join("aisix-bench-compare-test-out");
        Cli::try_parse_from(["compare", "--rev", rev, "--out", &out.to_string_lossy()])
            .unwrap()
            .compare
    }

    #[test]
    fn comparing_with_head_or_an_unknown_revision_is_skipped_without_failing() {
        let before = git(&gateway::workspace_root(), &["worktree", "list"]).unwrap();
        run(args("HEAD")).unwrap();
        run(args("no-such-revision-anywhere")).unwrap();
        let after = git(&gateway::workspace_root(), &["worktree", "list"]).unwrap();
        assert_eq!(before, after, "no worktree left behind");
        assert!(
            !std::env::temp_dir()
                .join("aisix-bench-compare-test-out")
                .exists(),
            "nothing was run"
        );
    }
}
