//! The gateway's folders are layered (docs/architecture.md): a folder names only folders below
//! it, so arrows between folders run one way. Read from the source as text, the way the
//! document's own check reads it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Top first; folders of one rank may not name each other.
const LAYERS: &[&[&str]] = &[
    &["relay"],
    &["route"],
    &["provider"],
    &["otel"],
    &["request"],
    &["snapshot"],
    &["target", "limit", "upstream"],
    &["wire"],
];

fn rank(folder: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&folder))
}

fn rust_files(folder: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(folder).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The crate-level names `crate::NAME` in `text`.
fn named(text: &str) -> BTreeSet<String> {
    text.match_indices("crate::")
        .map(|(at, found)| {
            text[at + found.len()..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect::<String>()
        })
        .filter(|name| !name.is_empty())
        .collect()
}

#[test]
fn every_folder_names_only_folders_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut folders: Vec<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    folders.sort();
    let mut wrong = Vec::new();
    for folder in &folders {
        let own = rank(folder)
            .unwrap_or_else(|| panic!("src/{folder}/ has no layer in LAYERS (and the doc)"));
        let mut files = Vec::new();
        rust_files(&src.join(folder), &mut files);
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            for name in named(&text) {
                if name == *folder {
                    continue;
                }
                if let Some(theirs) = rank(&name)
                    && theirs <= own
                {
                    wrong.push(format!(
                        "{} names crate::{name}",
                        file.strip_prefix(&src).unwrap().display()
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "arrows pointing up or sideways:\n{}",
        wrong.join("\n")
    );
}
