//! Reading items from the repository's working tree: one item by id, or every item of a
//! tenant's layers.
//!
//! Reads take no lock: writes replace files by rename, so a reader sees a whole old or a
//! whole new file. Scans are bounded (depth, number of files, file size), never follow
//! symlinks, skip hidden names (temporary files), and skip, with a warning, files that
//! cannot be read back, so one hand-edited file cannot break every query.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::error::KnowledgeError;
use super::item::{Document, Item};
use super::paths::{ITEM_EXTENSION, ItemId, ItemPath, MAX_SEGMENTS, TenantDir};
use super::resolve;
use crate::skills::governance::Layer;

/// Most files a scan reads; past it the scan stops with a warning.
pub const MAX_SCANNED_FILES: usize = 10_000;

/// Read access to the items in the working tree.
#[derive(Debug, Clone)]
pub struct WorkingTree {
    root: PathBuf,
    max_item_bytes: usize,
}

impl WorkingTree {
    /// `root` must be the canonical repository root.
    pub fn new(root: PathBuf, max_item_bytes: usize) -> Self {
        Self {
            root,
            max_item_bytes,
        }
    }

    /// The item `id` of `tenant`, or `None` if there is none.
    pub fn read(&self, tenant: &TenantDir, id: &ItemId) -> Result<Option<Item>, KnowledgeError> {
        let Some(file) = resolve::resolve_for_read(&self.root, tenant, id)? else {
            return Ok(None);
        };
        let text = self
            .read_bounded(&file)?
            .ok_or_else(|| KnowledgeError::Corrupt {
                id: id.to_string(),
                reason: format!("larger than {} bytes", self.max_item_bytes),
            })?;
        parse_item(id.clone(), &text).map(Some)
    }

    /// Every readable item of `tenant` in `layers`, in no particular order.
    pub fn scan(&self, tenant: &TenantDir, layers: &[Layer]) -> Result<Vec<Item>, KnowledgeError> {
        let mut items = Vec::new();
        let mut budget = MAX_SCANNED_FILES;
        for &layer in layers {
            let dir = resolve::layer_dir(&self.root, tenant, layer);
            match fs::symlink_metadata(&dir) {
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => {
                    tracing::warn!(dir = %dir.display(), "knowledge layer folder is not a folder; skipped");
                    continue;
                }
                Err(_) => continue,
            }
            self.scan_dir(&dir, layer, "", 0, &mut budget, &mut items)?;
        }
        Ok(items)
    }

    fn scan_dir(
        &self,
        dir: &Path,
        layer: Layer,
        prefix: &str,
        depth: usize,
        budget: &mut usize,
        items: &mut Vec<Item>,
    ) -> Result<(), KnowledgeError> {
        let mut entries: Vec<_> = fs::read_dir(dir)?.collect::<Result<_, _>>()?;
        // Sorted so that a scan cut short by the budget is the same every time.
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with('.') {
                continue;
            }
            // `DirEntry::file_type` does not follow symlinks: a symlink is neither.
            let kind = entry.file_type()?;
            let relative = if prefix.is_empty() {
                name.to_owned()
            } else {
                format!("{prefix}/{name}")
            };
            if kind.is_dir() && depth + 1 < MAX_SEGMENTS {
                self.scan_dir(&entry.path(), layer, &relative, depth + 1, budget, items)?;
            } else if kind.is_file() && name.ends_with(ITEM_EXTENSION) {
                if *budget == 0 {
                    tracing::warn!(
                        limit = MAX_SCANNED_FILES,
                        "knowledge scan stopped at its file limit"
                    );
                    return Ok(());
                }
                *budget -= 1;
                if let Some(item) = self.scan_file(&entry.path(), layer, &relative) {
                    items.push(item);
                }
            }
        }
        Ok(())
    }

    fn scan_file(&self, file: &Path, layer: Layer, relative: &str) -> Option<Item> {
        let skip = |reason: String| {
            tracing::warn!(file = %file.display(), %reason, "knowledge file skipped");
            None
        };
        let id = match ItemPath::parse(relative) {
            Ok(path) => ItemId::new(layer, path),
            Err(e) => return skip(e.to_string()),
        };
        match self.read_bounded(file) {
            Ok(Some(text)) => parse_item(id, &text).map_err(|e| e.to_string()),
            Ok(None) => Err(format!("larger than {} bytes", self.max_item_bytes)),
            Err(e) => Err(e.to_string()),
        }
        .map_or_else(skip, Some)
    }

    /// The file's text, or `None` if it is over the size limit (read no further).
    fn read_bounded(&self, file: &Path) -> Result<Option<String>, KnowledgeError> {
        let limit = self.max_item_bytes as u64;
        let mut text = String::new();
        fs::File::open(file)?
            .take(limit + 1)
            .read_to_string(&mut text)?;
        Ok((text.len() as u64 <= limit).then_some(text))
    }
}

fn parse_item(id: ItemId, text: &str) -> Result<Item, KnowledgeError> {
    let doc = Document::parse(text).map_err(|e| KnowledgeError::Corrupt {
        id: id.to_string(),
        reason: e.to_string(),
    })?;
    Ok(Item {
        id,
        front: doc.front,
        body: doc.body,
        commit: None,
    })
}
