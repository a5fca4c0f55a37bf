//! The layering `ARCHITECTURE.md` promises, checked on the source: `config` is a leaf,
//! importing nothing of the crate (every other module may read settings; settings read
//! no module).

use std::path::{Path, PathBuf};

/// What a file of `config` must not contain: a path into the crate, out of `config`
/// through its parent, or through the library's own name.
const FORBIDDEN: [&str; 3] = ["crate::", "super::super", "agent_a2a::"];

/// `src/config.rs` and every file under `src/config/`.
fn config_files() -> Vec<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut pending: Vec<PathBuf> = std::fs::read_dir(&src)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("config")
        })
        .collect();
    while let Some(path) = pending.pop() {
        if path.is_dir() {
            pending.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// Each line of `text` that names a forbidden path, as `file:line: text`.
fn offences(file: &Path, text: &str) -> Vec<String> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| FORBIDDEN.iter().any(|path| line.contains(path)))
        .map(|(i, line)| format!("{}:{}: {}", file.display(), i + 1, line.trim()))
        .collect()
}

#[test]
fn config_imports_nothing_of_the_crate() {
    let files = config_files();
    assert!(
        files.iter().any(|f| f.ends_with("config.rs"))
            && files.iter().any(|f| f.ends_with("config/server.rs")),
        "the scan found config's files: {files:?}"
    );
    let found: Vec<String> = files
        .iter()
        .flat_map(|file| offences(file, &std::fs::read_to_string(file).unwrap()))
        .collect();
    assert!(
        found.is_empty(),
        "config must import nothing of the crate (the module owning a type converts the \
         settings into it):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scan_names_file_and_line() {
    let text = "use serde::Serialize;\nuse crate::store::StoreConfig;\n";
    assert_eq!(
        offences(Path::new("src/config/x.rs"), text),
        ["src/config/x.rs:2: use crate::store::StoreConfig;"]
    );
    assert!(offences(Path::new("x"), "use super::positive;\n").is_empty());
    assert_eq!(
        offences(Path::new("x"), "use super::super::domain;\n").len(),
        1
    );
}
