//! The git repository behind the knowledge engine: one commit per write, deletions
//! included, and the history of one file.
//!
//! Blocking by design (libgit2 is synchronous): callers on an async runtime go through
//! `spawn_blocking`. Writes are serialised by one mutex, which also holds the open
//! `Repository` (it is `Send` but not `Sync`); a caller takes a [`RepoWriter`] and keeps
//! it for its whole read-check-write sequence, so two writers never interleave.
//! Readers open their own `Repository` per call and never wait for the writer.
//!
//! **Durability.** libgit2 syncs what it writes in the git folder (objects, refs, the
//! index: `GIT_OPT_ENABLE_FSYNC_GITDIR`), and a new repository is synced whole, files and
//! folders, before it is used: on a filesystem that delays allocation, files not synced
//! can be empty after a power loss in their first seconds, and a repository whose `HEAD`
//! is empty does not open. A start that finds the repository damaged says so and what
//! to do.
//!
//! Each commit stages exactly one path on an index reset to HEAD's tree: `add_path` for a
//! write, `remove_path` for a deletion. The original staged `*` with `add_all`, which
//! swept every tenant's stray files into whatever commit came next and, in the libgit2
//! versions it was written against, was reported not to stage deletions; staging the one
//! path explicitly makes both questions moot (and the tests prove each).

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use git2::{Oid, Repository, RepositoryInitOptions, Signature, Sort};

use super::error::KnowledgeError;
use super::paths::{ItemId, TenantDir};
use super::resolve;
use crate::domain::Timestamp;

/// Most commits inspected when looking for a file's history, so a `show` on an old
/// item in a huge repository stays bounded.
pub const MAX_COMMITS_WALKED: usize = 100_000;

/// A commit that touched an item.
#[derive(Debug, Clone, PartialEq)]
pub struct CommitInfo {
    pub id: String,
    pub author: String,
    pub time: Timestamp,
    pub message: String,
}

/// The knowledge repository on disk.
pub struct KnowledgeRepo {
    root: PathBuf,
    committer_name: String,
    committer_email: String,
    writer: Mutex<Repository>,
}

impl KnowledgeRepo {
    /// Opens the repository at `path`, or creates it (folder, `git init` with branch
    /// `main`, and an empty first commit so HEAD always names a commit).
    pub fn open_or_init(
        path: &Path,
        committer_name: &str,
        committer_email: &str,
    ) -> Result<KnowledgeRepo, KnowledgeError> {
        sync_git_writes();
        fs::create_dir_all(path)?;
        let root = fs::canonicalize(path)?;
        let (repo, created) = match Repository::open(&root) {
            Ok(repo) => (repo, false),
            Err(e) if e.code() == git2::ErrorCode::NotFound && !root.join(".git").exists() => (
                Repository::init_opts(&root, RepositoryInitOptions::new().initial_head("main"))?,
                true,
            ),
            Err(e) => return Err(damaged(&root, &e)),
        };
        if repo.is_bare() {
            return Err(KnowledgeError::Io(io::Error::other(format!(
                "{} is a bare repository; the knowledge repository needs a working tree",
                root.display()
            ))));
        }
        let committer_name = clean_name(committer_name);
        match repo.head() {
            Ok(_) => {}
            // A new repository, before its first commit.
            Err(e) if created || e.code() == git2::ErrorCode::UnbornBranch => {}
            Err(e) => return Err(damaged(&root, &e)),
        }
        if created || repo.head().is_err() {
            let sig = Signature::now(&committer_name, committer_email)?;
            let tree = repo.find_tree(repo.index()?.write_tree()?)?;
            repo.commit(
                Some("HEAD"),
                &sig,
                &sig,
                "Start the knowledge repository",
                &tree,
                &[],
            )?;
        }
        if created {
            sync_tree(&root.join(".git"))?;
            sync_dir(&root)?;
            if let Some(parent) = root.parent() {
                sync_dir(parent)?;
            }
        }
        Ok(KnowledgeRepo {
            root,
            committer_name,
            committer_email: committer_email.to_owned(),
            writer: Mutex::new(repo),
        })
    }

    /// The canonical path of the working tree.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Takes the write lock. Hold it across the whole read-check-write of one operation.
    pub(super) fn writer(&self) -> RepoWriter<'_> {
        // A panic while holding the lock leaves nothing half-done that matters: every
        // commit starts from HEAD's tree, and a failed write restores the file first.
        let repo = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        RepoWriter { repo, owner: self }
    }

    /// The commits that changed `file` (relative path), newest first, at most `limit`.
    /// A deletion is a change, so a deleted file's history ends with its deletion.
    pub fn history(&self, file: &str, limit: usize) -> Result<Vec<CommitInfo>, KnowledgeError> {
        let repo = Repository::open(&self.root)?;
        let mut walk = repo.revwalk()?;
        walk.push_head()?;
        walk.set_sorting(Sort::TOPOLOGICAL | Sort::TIME)?;
        let path = Path::new(file);
        let mut found = Vec::new();
        for oid in walk.take(MAX_COMMITS_WALKED) {
            if found.len() >= limit {
                break;
            }
            let commit = repo.find_commit(oid?)?;
            let now = blob_at(&commit.tree()?, path);
            let before = match commit.parent(0) {
                Ok(parent) => blob_at(&parent.tree()?, path),
                Err(_) => None,
            };
            if now != before {
                found.push(commit_info(&commit));
            }
        }
        Ok(found)
    }

    /// The commit HEAD names.
    pub fn head(&self) -> Result<CommitInfo, KnowledgeError> {
        let repo = Repository::open(&self.root)?;
        let commit = repo.head()?.peel_to_commit()?;
        Ok(commit_info(&commit))
    }
}

/// The write lock and the repository it guards.
pub struct RepoWriter<'a> {
    repo: MutexGuard<'a, Repository>,
    owner: &'a KnowledgeRepo,
}

impl RepoWriter<'_> {
    /// Writes the item's file and commits it as `author`. If the commit fails, the file
    /// is put back as it was, so the working tree never shows an uncommitted change.
    pub fn write(
        &mut self,
        tenant: &TenantDir,
        id: &ItemId,
        contents: &[u8],
        author: &str,
        message: &str,
    ) -> Result<CommitInfo, KnowledgeError> {
        let root = self.owner.root.clone();
        let file = resolve::resolve_for_write(&root, tenant, id)?;
        let previous = match fs::read(&file) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e.into()),
        };
        write_atomically(&file, contents)?;
        let relative = id.relative_file(tenant);
        self.commit(&relative, false, author, message)
            .inspect_err(|_| restore(&file, previous.as_deref()))
    }

    /// Deletes the item's file and commits the deletion as `author`.
    pub fn delete(
        &mut self,
        tenant: &TenantDir,
        id: &ItemId,
        author: &str,
        message: &str,
    ) -> Result<CommitInfo, KnowledgeError> {
        let root = self.owner.root.clone();
        let file = resolve::resolve_for_read(&root, tenant, id)?
            .ok_or_else(|| KnowledgeError::NotFound(id.to_string()))?;
        let previous = fs::read(&file)?;
        fs::remove_file(&file)?;
        let relative = id.relative_file(tenant);
        let info = self
            .commit(&relative, true, author, message)
            .inspect_err(|_| restore(&file, Some(&previous)))?;
        prune_empty_folders(&file, &resolve::layer_dir(&root, tenant, id.layer));
        Ok(info)
    }

    fn commit(
        &mut self,
        relative: &str,
        removed: bool,
        author: &str,
        message: &str,
    ) -> Result<CommitInfo, KnowledgeError> {
        let repo = &*self.repo;
        let head = repo.head()?.peel_to_commit()?;
        let mut index = repo.index()?;
        // Start from HEAD, not from whatever the index holds: each commit is exactly
        // this one change.
        index.read_tree(&head.tree()?)?;
        let path = Path::new(relative);
        if removed {
            index.remove_path(path)?;
        } else {
            index.add_path(path)?;
        }
        let tree = repo.find_tree(index.write_tree()?)?;
        index.write()?;
        let author = Signature::now(&clean_name(author), &self.owner.committer_email)?;
        let committer = Signature::now(&self.owner.committer_name, &self.owner.committer_email)?;
        let oid: Oid = repo.commit(Some("HEAD"), &author, &committer, message, &tree, &[&head])?;
        Ok(commit_info(&repo.find_commit(oid)?))
    }
}

fn blob_at(tree: &git2::Tree<'_>, path: &Path) -> Option<Oid> {
    tree.get_path(path).ok().map(|entry| entry.id())
}

fn commit_info(commit: &git2::Commit<'_>) -> CommitInfo {
    let author = commit.author();
    CommitInfo {
        id: commit.id().to_string(),
        author: String::from_utf8_lossy(author.name_bytes()).into_owned(),
        time: Timestamp(author.when().seconds() * 1000),
        message: String::from_utf8_lossy(commit.message_bytes())
            .trim_end()
            .to_owned(),
    }
}

/// A signature name git accepts: no angle brackets or control characters, not empty.
fn clean_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .filter(|c| !c.is_control() && *c != '<' && *c != '>')
        .collect();
    let cleaned = cleaned.trim();
    if cleaned.is_empty() {
        "unknown".to_owned()
    } else {
        cleaned.to_owned()
    }
}

/// Has libgit2 sync what it writes in a git folder (once per process).
fn sync_git_writes() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        libgit2_sys::init();
        // SAFETY: a documented option taking one int, set before any repository is
        // opened by this process's knowledge engine.
        unsafe {
            libgit2_sys::git_libgit2_opts(
                libgit2_sys::GIT_OPT_ENABLE_FSYNC_GITDIR as libc::c_int,
                1 as libc::c_int,
            );
        }
    });
}

/// Syncs every file and folder under `dir`.
fn sync_tree(dir: &Path) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            sync_tree(&entry.path())?;
        } else {
            fs::File::open(entry.path())?.sync_all()?;
        }
    }
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

/// The error of a repository that exists but cannot be used, saying what to do.
fn damaged(root: &Path, e: &git2::Error) -> KnowledgeError {
    KnowledgeError::Io(io::Error::other(format!(
        "the repository at {} is damaged ({}); restore it from a backup, or move it aside \
         (its items are then left out) and start again to begin an empty one",
        root.display(),
        e.message()
    )))
}

/// Writes through a temporary file and a rename, so a reader scanning the working tree
/// without the lock sees the old file or the new one, never half of one. The temporary
/// name starts with a dot: no item path can name it, and scans skip it.
fn write_atomically(file: &Path, contents: &[u8]) -> io::Result<()> {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = file.with_file_name(format!(".{name}.tmp"));
    let mut out = fs::File::create(&tmp)?;
    out.write_all(contents)?;
    out.sync_all()?;
    fs::rename(&tmp, file)?;
    // The rename itself, so that the file the commit names is there after a power loss.
    match file.parent() {
        Some(dir) => sync_dir(dir),
        None => Ok(()),
    }
}

/// Puts a file back after a failed commit; a failure here is logged, as the original
/// error is the one to report.
fn restore(file: &Path, previous: Option<&[u8]>) {
    let result = match previous {
        Some(bytes) => write_atomically(file, bytes),
        None => fs::remove_file(file),
    };
    if let Err(e) = result {
        tracing::error!(file = %file.display(), error = %e, "could not restore a knowledge file after a failed commit");
    }
}

/// Removes folders left empty by a deletion, up to (not including) the layer folder.
fn prune_empty_folders(file: &Path, layer_dir: &Path) {
    let mut dir = file.parent();
    while let Some(d) = dir {
        if d == layer_dir || !d.starts_with(layer_dir) || fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A repository whose files a power loss left empty (`HEAD`, as seen on a filesystem
    /// that drops what was not synced): the start says it is damaged and what to do.
    #[test]
    fn a_damaged_repository_is_named_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        drop(KnowledgeRepo::open_or_init(dir.path(), "agent-a2a", "kb@example.org").unwrap());
        fs::write(dir.path().join(".git/HEAD"), b"").unwrap();
        let e = KnowledgeRepo::open_or_init(dir.path(), "agent-a2a", "kb@example.org")
            .err()
            .expect("a damaged repository is not used")
            .to_string();
        assert!(e.contains("is damaged"), "{e}");
        assert!(
            e.contains("restore it from a backup, or move it aside"),
            "{e}"
        );
        // Nothing was made anew over it.
        assert_eq!(fs::read(dir.path().join(".git/HEAD")).unwrap(), b"");
    }

    fn repo() -> (tempfile::TempDir, KnowledgeRepo) {
        let dir = tempfile::tempdir().unwrap();
        let repo = KnowledgeRepo::open_or_init(dir.path(), "agent-a2a", "kb@example.org").unwrap();
        (dir, repo)
    }

    fn id(raw: &str) -> ItemId {
        ItemId::parse(raw).unwrap()
    }

    #[test]
    fn a_new_repository_has_a_first_commit_and_reopens() {
        let (dir, repo) = repo();
        let first = repo.head().unwrap();
        assert_eq!(first.message, "Start the knowledge repository");
        drop(repo);
        let again = KnowledgeRepo::open_or_init(dir.path(), "x", "x@example.org").unwrap();
        assert_eq!(
            again.head().unwrap().id,
            first.id,
            "no second initial commit"
        );
    }

    #[test]
    fn writes_and_deletions_are_single_commits_with_author_and_message() {
        let (_dir, repo) = repo();
        let tenant = TenantDir::parse("acme").unwrap();
        let item = id("project/adr/one");
        let file = item.relative_file(&tenant);
        let mut w = repo.writer();
        let created = w
            .write(&tenant, &item, b"v1", "acme", "create one")
            .unwrap();
        let updated = w
            .write(&tenant, &item, b"v2", "acme", "update one")
            .unwrap();
        w.write(&tenant, &id("team/other"), b"x", "acme", "unrelated")
            .unwrap();
        let deleted = w.delete(&tenant, &item, "acme", "delete one").unwrap();
        drop(w);

        assert_eq!(created.author, "acme");
        let history = repo.history(&file, 10).unwrap();
        let messages: Vec<&str> = history.iter().map(|c| c.message.as_str()).collect();
        assert_eq!(messages, ["delete one", "update one", "create one"]);
        assert_eq!(history[0].id, deleted.id);
        assert_eq!(history[1].id, updated.id);

        let git = Repository::open(repo.root()).unwrap();
        let head = git.head().unwrap().peel_to_commit().unwrap();
        assert_eq!(head.id().to_string(), deleted.id, "the deletion is HEAD");
        assert_eq!(head.committer().name().ok(), Some("agent-a2a"));
        assert_eq!(head.author().email().ok(), Some("kb@example.org"));
        let tree = head.tree().unwrap();
        assert!(
            tree.get_path(Path::new(&file)).is_err(),
            "gone from HEAD's tree"
        );
        assert!(tree.get_path(Path::new("acme/team/other.md")).is_ok());
        assert!(
            !repo.root().join("acme/project/adr").exists(),
            "empty folder pruned"
        );
        assert!(
            git.statuses(None).unwrap().is_empty(),
            "working tree, index and HEAD agree"
        );
    }

    #[test]
    fn deleting_a_missing_item_is_not_found_and_commits_nothing() {
        let (_dir, repo) = repo();
        let tenant = TenantDir::parse("acme").unwrap();
        let before = repo.head().unwrap().id;
        let err = repo
            .writer()
            .delete(&tenant, &id("org/none"), "acme", "m")
            .unwrap_err();
        assert!(matches!(err, KnowledgeError::NotFound(_)));
        assert_eq!(repo.head().unwrap().id, before);
    }

    #[test]
    fn stray_files_are_not_swept_into_commits() {
        let (_dir, repo) = repo();
        let tenant = TenantDir::parse("acme").unwrap();
        fs::create_dir_all(repo.root().join("other")).unwrap();
        fs::write(repo.root().join("other/stray.md"), "stray").unwrap();
        repo.writer()
            .write(&tenant, &id("project/x"), b"x", "acme", "m")
            .unwrap();
        let git = Repository::open(repo.root()).unwrap();
        let tree = git.head().unwrap().peel_to_tree().unwrap();
        assert!(tree.get_path(Path::new("other/stray.md")).is_err());
    }

    #[test]
    fn signature_names_are_cleaned() {
        assert_eq!(clean_name("a <b>\n"), "a b");
        assert_eq!(clean_name("<>"), "unknown");
    }
}
