//! `resources_watch`: reload when the resources file changes. The folder holding the file is
//! watched (inotify on Linux), not the file: a Kubernetes ConfigMap volume updates by swapping
//! its `..data` symlink, which never touches the file's own name, and editors often replace a
//! file by renaming another over it. Events are debounced, and the reload itself does nothing
//! when the file's bytes did not change.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::{Notify, mpsc};

use super::reload::Trigger;

/// Quiet time after the last event before reloading: one swap or save is several events.
const DEBOUNCE: Duration = Duration::from_millis(200);

/// Starts watching the folder of `file`; dropping the returned watcher stops it.
pub(crate) fn start(
    file: &Path,
    triggers: mpsc::Sender<Trigger>,
) -> Result<notify::RecommendedWatcher, String> {
    let folder = match file.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    // shared: notify's thread signals, the control runtime's debounce task waits.
    let changed = Arc::new(Notify::new());
    let signal = changed.clone();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        match event {
            // Reads (ours included) change nothing; anything else in the folder may.
            Ok(event) if matches!(event.kind, EventKind::Access(_)) => {}
            Ok(_) => signal.notify_one(),
            Err(error) => tracing::warn!(%error, "resources watch error"),
        }
    })
    .map_err(|e| format!("cannot start the resources watch: {e}"))?;
    watcher
        .watch(&folder, RecursiveMode::NonRecursive)
        .map_err(|e| format!("cannot watch {}: {e}", folder.display()))?;
    tracing::info!(folder = %folder.display(), "resources watch: reloading when the resources file changes");
    tokio::spawn(debounce(changed, triggers));
    Ok(watcher)
}

async fn debounce(changed: Arc<Notify>, triggers: mpsc::Sender<Trigger>) {
    loop {
        changed.notified().await;
        while tokio::time::timeout(DEBOUNCE, changed.notified())
            .await
            .is_ok()
        {}
        if triggers.send(Trigger::FileChanged).await.is_err() {
            return;
        }
    }
}
