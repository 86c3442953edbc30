//! The container image. `docker build` cannot run offline here, so the Dockerfile's structure is
//! checked (stages, locked build, distroless non-root runtime, entrypoint, no HEALTHCHECK), and
//! the release binary is run under the image's conditions: as uid 65532, chrooted into a root
//! that holds only the binary, its shared libraries and its config, mounted read-only, with no
//! shell. The mount namespace comes from `unshare`; the image itself is not built.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use aisix_e2e::client;
use aisix_e2e::gateway::{Gateway, release_binary};

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// One Dockerfile instruction: keyword (upper case) and its arguments, continuations joined.
#[derive(Debug)]
struct Instruction {
    keyword: String,
    args: String,
}

fn dockerfile() -> Vec<Instruction> {
    let text = std::fs::read_to_string(workspace().join("Dockerfile")).unwrap();
    let mut instructions = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if pending.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                pending.push_str(head);
                pending.push(' ');
            }
            None => {
                pending.push_str(trimmed);
                let (keyword, args) = pending.split_once(' ').unwrap_or((&pending, ""));
                instructions.push(Instruction {
                    keyword: keyword.to_uppercase(),
                    args: args.trim().to_owned(),
                });
                pending.clear();
            }
        }
    }
    instructions
}

/// The instructions of each stage, by stage name.
fn stages() -> Vec<(String, String, Vec<Instruction>)> {
    let mut stages: Vec<(String, String, Vec<Instruction>)> = Vec::new();
    for instruction in dockerfile() {
        if instruction.keyword == "FROM" {
            let words: Vec<&str> = instruction.args.split_whitespace().collect();
            assert!(
                words.len() == 3 && words[1].eq_ignore_ascii_case("as"),
                "every stage is named: FROM {}",
                instruction.args
            );
            stages.push((words[2].to_owned(), words[0].to_owned(), Vec::new()));
        } else {
            stages
                .last_mut()
                .expect("instructions follow a FROM")
                .2
                .push(instruction);
        }
    }
    stages
}

#[test]
fn the_dockerfile_builds_locked_in_one_stage_and_runs_distroless_as_non_root() {
    let stages = stages();
    assert_eq!(stages.len(), 2, "a build stage and a runtime stage");
    let (build_name, build_image, build) = &stages[0];
    let (_, runtime_image, runtime) = &stages[1];

    // The build stage uses the toolchain rust-toolchain.toml pins, and the lock file.
    let toolchain = std::fs::read_to_string(workspace().join("rust-toolchain.toml")).unwrap();
    let channel = toolchain
        .lines()
        .find_map(|l| l.strip_prefix("channel = "))
        .unwrap()
        .trim_matches('"');
    let minor = channel.rsplit_once('.').map_or(channel, |(head, _)| head);
    assert!(
        build_image.starts_with(&format!("rust:{minor}")),
        "{build_image} vs toolchain {channel}"
    );
    assert!(
        build.iter().any(|i| i.keyword == "RUN"
            && i.args.contains("cargo build --release --locked")
            && i.args.contains("--bin aisix")),
        "{build:?}"
    );
    // cargo loads the whole workspace: every member's folder must be in the build context.
    let copied: Vec<&str> = build
        .iter()
        .filter(|i| i.keyword == "COPY")
        .flat_map(|i| i.args.split_whitespace().rev().skip(1))
        .collect();
    for member in workspace_members() {
        let top = member.split('/').next().unwrap();
        assert!(
            copied.contains(&top) || copied.contains(&member.as_str()),
            "the build stage does not copy the workspace member {member}"
        );
    }

    // The runtime stage: distroless, copies only the binary, runs it as a non-root user.
    assert!(
        runtime_image.starts_with("gcr.io/distroless/") && runtime_image.ends_with(":nonroot"),
        "{runtime_image}"
    );
    assert!(
        runtime.iter().all(|i| i.keyword != "RUN"),
        "the runtime stage has no shell to RUN with"
    );
    let copies: Vec<&Instruction> = runtime.iter().filter(|i| i.keyword == "COPY").collect();
    assert_eq!(copies.len(), 1, "{copies:?}");
    let copy: Vec<&str> = copies[0].args.split_whitespace().collect();
    assert_eq!(copy[0], format!("--from={build_name}"));
    let installed = copy[2];

    let last = |keyword: &str| {
        runtime
            .iter()
            .rev()
            .find(|i| i.keyword == keyword)
            .map(|i| i.args.as_str())
            .unwrap_or_else(|| panic!("no {keyword} in the runtime stage"))
    };
    let user = last("USER");
    let uid = user.split(':').next().unwrap();
    assert!(
        uid != "0" && uid != "root" && uid.parse::<u32>().is_ok(),
        "a numeric non-root USER, so runAsNonRoot can check it: {user}"
    );
    assert_eq!(last("HEALTHCHECK"), "NONE");
    let entrypoint: Vec<String> = serde_json::from_str(last("ENTRYPOINT")).expect("exec form");
    assert_eq!(entrypoint, [installed]);
    let cmd: Vec<String> = serde_json::from_str(last("CMD")).expect("exec form");
    assert_eq!(cmd, ["--config", "/etc/aisix/config.yaml"]);

    let ignored = std::fs::read_to_string(workspace().join(".dockerignore")).unwrap();
    assert!(
        ignored.lines().any(|l| l == "target"),
        "the build context skips target/"
    );
}

/// The `members` of the root Cargo.toml: the quoted strings of its `members = [...]` list.
fn workspace_members() -> Vec<String> {
    let text = std::fs::read_to_string(workspace().join("Cargo.toml")).unwrap();
    let list = text
        .split("members = [")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .expect("a members list");
    list.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// A root holding the binary at `/usr/local/bin/aisix`, the shared libraries `ldd` names, and
/// `/etc/aisix/{config,resources}.yaml`; nothing else (no shell).
fn image_root(root: &Path, binary: &Path) {
    let bin = root.join("usr/local/bin/aisix");
    std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
    std::fs::copy(binary, &bin).unwrap();
    let ldd = Command::new("ldd").arg(binary).output().expect("run ldd");
    for lib in String::from_utf8_lossy(&ldd.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with('/'))
    {
        let target = root.join(lib.trim_start_matches('/'));
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(lib, &target).unwrap();
    }
    std::fs::create_dir_all(root.join("proc")).unwrap();
    std::fs::create_dir_all(root.join("etc/aisix")).unwrap();
    std::fs::write(
        root.join("etc/aisix/config.yaml"),
        "proxy:\n  addr: 127.0.0.1:0\n  workers: 2\nobservability:\n  metrics:\n    prometheus:\n      addr: 127.0.0.1:0\nresources_file: resources.yaml\nresources_watch: true\n",
    )
    .unwrap();
    std::fs::write(
        root.join("etc/aisix/resources.yaml"),
        "_format_version: \"1\"\nprovider_keys:\n  - {display_name: local, provider: mock}\nmodels:\n  - {display_name: demo, provider: mock, model_name: m, provider_key: local}\napi_keys:\n  - {display_name: demo, key_hash: fdee306ee20284546953efcaf060f0b555c52d4941bfa7c55d95b87acba3d26b, allowed_models: [\"*\"]}\n",
    )
    .unwrap();
}

/// The pid of the `aisix` process whose parent is `parent`, once it has exec'd.
fn aisix_child_of(parent: u32) -> Option<u32> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let status = std::fs::read_to_string(entry.path().join("status")).ok()?;
            let field = |name: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(str::trim)
                    .map(str::to_owned)
            };
            (field("Name:")? == "aisix" && field("PPid:")?.parse::<u32>().ok()? == parent)
                .then_some(pid)
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_release_binary_serves_as_non_root_on_a_read_only_root_without_a_shell() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    image_root(&root, release_binary());
    assert!(!root.join("bin/sh").exists() && !root.join("usr/bin/sh").exists());

    // unshare gives a private mount namespace; inside it the root is bound read-only, /proc is
    // mounted as a container runtime would, and chroot drops to the image's uid before exec.
    let root_arg = root.display().to_string();
    let mut command = Command::new("unshare");
    command.args(["--mount", "--fork", "sh", "-c"]).arg(format!(
        "mount --bind {root_arg} {root_arg} && mount -o remount,bind,ro {root_arg} && \
         mount -t proc proc {root_arg}/proc && \
         exec chroot --userspec=65532:65532 {root_arg} /usr/local/bin/aisix --config /etc/aisix/config.yaml"
    ));
    let mut gateway = Gateway::start_command(command, dir);

    let pid = aisix_child_of(gateway.pid()).expect("aisix runs under unshare");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uids = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(
        uids.split_whitespace().skip(1).all(|uid| uid == "65532"),
        "{uids}"
    );
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    let root_mount = mounts
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some("/"))
        .expect("a mount at / as the process sees it");
    assert!(
        root_mount
            .split_whitespace()
            .nth(5)
            .unwrap()
            .split(',')
            .any(|o| o == "ro"),
        "{root_mount}"
    );

    let reply = client::send(
        gateway.addr(),
        client::request(
            "POST",
            "/v1/chat/completions",
            &[("authorization", "Bearer sk-aisix-demo")],
            Some(r#"{"model":"demo","messages":[{"role":"user","content":"hi"}]}"#),
        ),
    )
    .await;
    assert_eq!(reply.status, 200, "{}\n{}", reply.text(), gateway.logs());
    assert!(
        gateway.logs().contains("resources watch"),
        "{}",
        gateway.logs()
    );

    // SAFETY: kill(2) on the aisix process this test started.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
    let exit = gateway.wait_exit(Duration::from_secs(15)).expect("exits");
    assert_eq!(exit.code(), Some(0), "{}", gateway.logs());
}
