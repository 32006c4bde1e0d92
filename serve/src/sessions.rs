//! The gateway's MCP sessions: how many are open (`--max-sessions`), and each one's tenant,
//! kept in one place — the session's [`Place`], which the session owns — and found by its
//! `Mcp-Session-Id` through an index that holds places weakly and that a place leaves when its
//! session ends. Nothing here reads rmcp's session manager.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use dashmap::DashMap;

/// The open sessions.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    open: AtomicUsize,
    by_id: DashMap<String, Weak<Place>>,
}

/// One open session's place: its tenant, counted open until the place is dropped (with the
/// session's last clone), and its id once the response that opened it has named it.
#[derive(Debug)]
pub(crate) struct Place {
    sessions: Arc<Sessions>,
    tenant: Option<String>,
    id: OnceLock<String>,
}

impl Sessions {
    /// How many sessions are open (places reserved for sessions being opened included).
    pub(crate) fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// A place for a session of `tenant` if fewer than `max` are open: counted and checked in
    /// one step, so that simultaneous initializes cannot all pass a check and then all open.
    pub(crate) fn reserve(self: &Arc<Self>, max: usize, tenant: &str) -> Option<Arc<Place>> {
        self.open
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| self.counted(Some(tenant.to_owned())))
    }

    /// A place counted now whatever the limit (stdio: the one session of the process), for
    /// `tenant` (`None`: a session nobody authenticated, whose calls are all refused).
    pub(crate) fn place(self: &Arc<Self>, tenant: Option<&str>) -> Arc<Place> {
        self.open.fetch_add(1, Ordering::SeqCst);
        self.counted(tenant.map(str::to_owned))
    }

    fn counted(self: &Arc<Self>, tenant: Option<String>) -> Arc<Place> {
        Arc::new(Place {
            sessions: self.clone(),
            tenant,
            id: OnceLock::new(),
        })
    }

    /// The tenant of the session named `id`, while it is open.
    pub(crate) fn tenant_of(&self, id: &str) -> Option<String> {
        // The weak handle is taken out of the map before it is upgraded: the session may end
        // meanwhile, and the drop of its place takes the map's lock.
        let place = self.by_id.get(id).map(|w| w.clone())?;
        place.upgrade()?.tenant.clone()
    }

    /// The response that opened `place`'s session named it `id`: requests naming `id` find
    /// it from now on.
    pub(crate) fn name(&self, place: &Arc<Place>, id: &str) {
        if place.id.set(id.to_owned()).is_ok() {
            self.by_id.insert(id.to_owned(), Arc::downgrade(place));
        }
    }

    /// The session named `id` ended (its client deleted it; its place may outlive that
    /// briefly, while rmcp winds it down).
    pub(crate) fn forget(&self, id: &str) {
        self.by_id.remove(id);
    }
}

impl Place {
    /// The session's tenant.
    pub(crate) fn tenant(&self) -> Option<&str> {
        self.tenant.as_deref()
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some(id) = self.id.get() {
            self.sessions.forget(id);
        }
        self.sessions.open.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_place_is_counted_until_dropped_and_found_by_its_id_while_open() {
        let sessions = Arc::new(Sessions::default());
        let a = sessions.reserve(2, "acme").unwrap();
        let b = sessions.reserve(2, "umbrella").unwrap();
        assert!(sessions.reserve(2, "acme").is_none(), "the limit holds");
        assert_eq!(sessions.open(), 2);
        assert_eq!(sessions.tenant_of("s1"), None, "not named yet");
        sessions.name(&a, "s1");
        sessions.name(&a, "s2");
        assert_eq!(sessions.tenant_of("s1").as_deref(), Some("acme"));
        assert_eq!(sessions.tenant_of("s2"), None, "a place is named once");
        drop(a);
        assert_eq!(
            sessions.tenant_of("s1"),
            None,
            "an ended session is not found"
        );
        assert!(sessions.by_id.is_empty(), "and its entry is gone");
        assert_eq!(sessions.open(), 1);
        sessions.name(&b, "s3");
        sessions.forget("s3");
        assert_eq!(sessions.tenant_of("s3"), None);
        drop(b);
        assert_eq!(sessions.open(), 0);
        let stdio = sessions.place(None);
        assert_eq!((stdio.tenant(), sessions.open()), (None, 1));
    }
}
