//! A knowledge item's file on disk, found or made safely: every existing component on the
//! way is inspected with `symlink_metadata` (a symlink anywhere is refused) and the
//! parent folder, once canonicalised, must lie inside the canonical layer folder. The
//! spelling checks come first, in `paths.rs`.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::error::KnowledgeError;
use super::paths::{ITEM_EXTENSION, ItemId, PathError, TenantDir};
use crate::skills::governance::Layer;

/// The folder holding a tenant's items of one layer (which may not exist yet).
pub fn layer_dir(root: &Path, tenant: &TenantDir, layer: Layer) -> PathBuf {
    root.join(tenant.as_str()).join(layer.as_str())
}

/// The file of `id`, with every folder on the way created and checked. `root` must be
/// canonical. Refuses symlinks and anything that is not a folder on the way, an existing
/// non-file at the end, and a parent that canonicalises outside the layer folder.
pub fn resolve_for_write(
    root: &Path,
    tenant: &TenantDir,
    id: &ItemId,
) -> Result<PathBuf, KnowledgeError> {
    let file = walk(root, tenant, id, true)?;
    file.ok_or_else(|| {
        // `walk` with `create` only returns `None` if a folder vanished under us.
        KnowledgeError::Io(io::Error::other("a folder disappeared while writing"))
    })
}

/// The file of `id` if every component on the way exists and is safe; `None` when some
/// component is missing (the item does not exist). Refuses as [`resolve_for_write`] does.
pub fn resolve_for_read(
    root: &Path,
    tenant: &TenantDir,
    id: &ItemId,
) -> Result<Option<PathBuf>, KnowledgeError> {
    walk(root, tenant, id, false)
}

fn walk(
    root: &Path,
    tenant: &TenantDir,
    id: &ItemId,
    create: bool,
) -> Result<Option<PathBuf>, KnowledgeError> {
    let mut folders: Vec<&str> = vec![tenant.as_str(), id.layer.as_str()];
    let segments: Vec<&str> = id.path.segments().collect();
    let (last, parents) = segments
        .split_last()
        .ok_or(KnowledgeError::Path(PathError::Empty))?;
    folders.extend_from_slice(parents);

    let mut current = root.to_path_buf();
    for folder in folders {
        current.push(folder);
        match fs::symlink_metadata(&current) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(refused_symlink(root, &current));
            }
            Ok(meta) if !meta.is_dir() => return Err(in_the_way(root, &current)),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if !create {
                    return Ok(None);
                }
                match fs::create_dir(&current) {
                    Ok(()) => {}
                    // Created concurrently (a reader never creates; a second writer
                    // cannot exist): inspect what is there now.
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                        let meta = fs::symlink_metadata(&current)?;
                        if !meta.is_dir() || meta.file_type().is_symlink() {
                            return Err(in_the_way(root, &current));
                        }
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => return Err(e.into()),
        }
    }

    let file = current.join(format!("{last}{ITEM_EXTENSION}"));
    let exists = match fs::symlink_metadata(&file) {
        Ok(meta) if meta.file_type().is_symlink() => return Err(refused_symlink(root, &file)),
        Ok(meta) if !meta.is_file() => return Err(in_the_way(root, &file)),
        Ok(_) => true,
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => return Err(e.into()),
    };

    // Belt and braces: the components were checked one by one, but the final word is the
    // canonical location of the parent compared with the canonical layer folder.
    let layer = fs::canonicalize(layer_dir(root, tenant, id.layer))?;
    let parent = fs::canonicalize(&current)?;
    if !layer.starts_with(root) || !parent.starts_with(&layer) {
        return Err(PathError::Escapes.into());
    }
    if !create && !exists {
        return Ok(None);
    }
    Ok(Some(file))
}

fn shown(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

fn refused_symlink(root: &Path, path: &Path) -> KnowledgeError {
    PathError::Symlink(shown(root, path)).into()
}

fn in_the_way(root: &Path, path: &Path) -> KnowledgeError {
    PathError::InTheWay(shown(root, path)).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolution_creates_folders_inside_the_layer_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        let tenant = TenantDir::parse("acme").unwrap();
        let id = ItemId::parse("team/adr/deep/x").unwrap();
        assert_eq!(resolve_for_read(&root, &tenant, &id).unwrap(), None);
        let file = resolve_for_write(&root, &tenant, &id).unwrap();
        assert_eq!(file, root.join("acme/team/adr/deep/x.md"));
        assert!(root.join("acme/team/adr/deep").is_dir());
        assert_eq!(
            resolve_for_read(&root, &tenant, &id).unwrap(),
            None,
            "no file yet"
        );
        fs::write(&file, "x").unwrap();
        assert_eq!(resolve_for_read(&root, &tenant, &id).unwrap(), Some(file));
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_anywhere_on_the_way_are_refused() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        let tenant = TenantDir::parse("acme").unwrap();
        fs::create_dir_all(root.join("acme/project")).unwrap();
        symlink(outside.path(), root.join("acme/project/evil")).unwrap();
        symlink(outside.path(), root.join("acme/team")).unwrap();
        symlink(outside.path().join("f.md"), root.join("acme/project/f.md")).unwrap();
        for raw in ["project/evil/x", "team/x", "project/f"] {
            let id = ItemId::parse(raw).unwrap();
            let err = resolve_for_write(&root, &tenant, &id).unwrap_err();
            assert!(
                matches!(err, KnowledgeError::Path(PathError::Symlink(_))),
                "{raw}: {err:?}"
            );
            assert!(resolve_for_read(&root, &tenant, &id).is_err());
        }
        assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 0);
    }
}
