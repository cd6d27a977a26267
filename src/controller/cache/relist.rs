//! The one protocol of every table a watch fills. A watch reports `Init`, one `InitApply` per
//! listed object and `InitDone` when it starts, and again whenever it lost its place (410 Gone, a
//! new connection); between lists, `Apply` and `Delete` as they come. What a re-list no longer
//! holds was deleted while the watch was away: [`Relist::apply`] removes it at `InitDone`, so every
//! table forgets it the same way, and each table states only what it keeps ([`Table`]).

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use kube::runtime::watcher::Event;
use tokio::sync::watch;

/// What a watch keeps of its objects, and how it indexes them.
pub(crate) trait Table {
    type Object;
    type Key: Eq + Hash + Clone;
    /// What a change means to the table's readers (the objects to reconcile, whether to wake).
    type Changes: Default;

    /// Keeps what is kept of `object`, replacing what was kept under its key (or forgets that,
    /// when nothing of `object` is kept); returns its key.
    fn put(&mut self, object: Self::Object, changes: &mut Self::Changes) -> Self::Key;
    /// Forgets what is kept under `key`, if anything is.
    fn remove(&mut self, key: &Self::Key, changes: &mut Self::Changes);
    /// The key `object` is kept under (a deleted object's).
    fn key(object: &Self::Object) -> Self::Key;
    /// Every key kept.
    fn keys(&self) -> impl Iterator<Item = &Self::Key>;
    /// A list has completed (after what it no longer holds was removed): for a table whose readers
    /// act on each completed list.
    fn relisted(&mut self, _changes: &mut Self::Changes) {}
}

/// Where a table's watch is in its list.
pub(crate) struct Relist<K> {
    /// The keys of the list in progress (between `Init` and `InitDone`).
    listing: Option<HashSet<K>>,
    listed: bool,
}

impl<K> Default for Relist<K> {
    fn default() -> Self {
        Relist { listing: None, listed: false }
    }
}

impl<K: Eq + Hash + Clone> Relist<K> {
    /// Whether the first list has completed (before that, every object is new to every reader).
    pub(crate) fn listed(&self) -> bool {
        self.listed
    }

    /// Applies one watch event to `table`; what it changed.
    pub(crate) fn apply<T: Table<Key = K>>(&mut self, table: &mut T, event: Event<T::Object>) -> T::Changes {
        let mut changes = T::Changes::default();
        match event {
            Event::Init => self.listing = Some(HashSet::new()),
            Event::InitApply(object) | Event::Apply(object) => {
                let key = table.put(object, &mut changes);
                if let Some(listing) = self.listing.as_mut() {
                    listing.insert(key);
                }
            }
            Event::Delete(object) => table.remove(&T::key(&object), &mut changes),
            Event::InitDone => {
                if let Some(listing) = self.listing.take() {
                    let gone: Vec<K> = table.keys().filter(|key| !listing.contains(*key)).cloned().collect();
                    gone.iter().for_each(|key| table.remove(key, &mut changes));
                }
                table.relisted(&mut changes);
                self.listed = true;
            }
        }
        changes
    }
}

/// A table shared by the watch task that writes it ([`Writer`]) and everything that reads it.
pub(crate) struct Shared<T> {
    table: Arc<RwLock<T>>,
    listed: watch::Receiver<bool>,
}

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Shared { table: self.table.clone(), listed: self.listed.clone() }
    }
}

/// The watch task's end of a [`Shared`] table.
pub(crate) struct Writer<T: Table> {
    table: Arc<RwLock<T>>,
    listed: watch::Sender<bool>,
    relist: Relist<T::Key>,
}

/// `table`, shared, and the writer that fills it.
pub(crate) fn shared<T: Table>(table: T) -> (Shared<T>, Writer<T>) {
    let (listed_tx, listed) = watch::channel(false);
    let table = Arc::new(RwLock::new(table));
    (Shared { table: table.clone(), listed }, Writer { table, listed: listed_tx, relist: Relist::default() })
}

impl<T> Shared<T> {
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, T> {
        self.table.read().expect("not poisoned")
    }

    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, T> {
        self.table.write().expect("not poisoned")
    }

    /// Waits until the first list has completed; `false` if the writer is gone first.
    pub(crate) async fn listed(&self) -> bool {
        self.listed.clone().wait_for(|listed| *listed).await.is_ok()
    }

    /// Whether the first list has completed.
    pub(crate) fn is_listed(&self) -> bool {
        *self.listed.borrow()
    }
}

impl<T: Table> Writer<T> {
    /// Applies one watch event; what it changed.
    pub(crate) fn apply(&mut self, event: Event<T::Object>) -> T::Changes {
        let changes = self.relist.apply(&mut *self.table.write().expect("not poisoned"), event);
        if self.relist.listed() && !*self.listed.borrow() {
            self.listed.send_replace(true);
        }
        changes
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A table of names to values, recording what it was told.
    #[derive(Default)]
    struct Names(BTreeMap<&'static str, u32>);

    impl Table for Names {
        type Object = (&'static str, Option<u32>);
        type Key = &'static str;
        type Changes = Vec<String>;

        fn put(&mut self, (name, value): Self::Object, changes: &mut Vec<String>) -> &'static str {
            match value {
                Some(value) => self.0.insert(name, value).is_none().then(|| changes.push(format!("+{name}"))),
                None => self.0.remove(name).map(|_| changes.push(format!("-{name}"))),
            };
            name
        }
        fn remove(&mut self, key: &&'static str, changes: &mut Vec<String>) {
            if self.0.remove(key).is_some() {
                changes.push(format!("-{key}"));
            }
        }
        fn key(object: &Self::Object) -> &'static str {
            object.0
        }
        fn keys(&self) -> impl Iterator<Item = &&'static str> {
            self.0.keys()
        }
    }

    fn list(
        relist: &mut Relist<&'static str>,
        table: &mut Names,
        objects: &[(&'static str, Option<u32>)],
    ) -> Vec<String> {
        let mut changes = relist.apply(table, Event::Init);
        for object in objects {
            changes.extend(relist.apply(table, Event::InitApply(*object)));
        }
        changes.extend(relist.apply(table, Event::InitDone));
        changes
    }

    #[test]
    fn a_relist_forgets_what_it_no_longer_holds_and_only_that() {
        let (mut relist, mut table) = (Relist::default(), Names::default());
        assert!(!relist.listed());
        assert_eq!(list(&mut relist, &mut table, &[("a", Some(1)), ("b", Some(2))]), ["+a", "+b"]);
        assert!(relist.listed());
        assert_eq!(relist.apply(&mut table, Event::Apply(("c", Some(3)))), ["+c"]);
        assert_eq!(relist.apply(&mut table, Event::Delete(("c", None))), ["-c"]);
        // Deleted while the watch was away, and one listed but no longer kept.
        assert_eq!(list(&mut relist, &mut table, &[("b", None), ("d", Some(4))]), ["-b", "+d", "-a"]);
        assert_eq!(table.0, BTreeMap::from([("d", 4)]));
    }

    #[test]
    fn an_init_done_without_its_init_forgets_nothing() {
        let (mut relist, mut table) = (Relist::default(), Names::default());
        relist.apply(&mut table, Event::Apply(("a", Some(1))));
        assert!(relist.apply(&mut table, Event::InitDone).is_empty());
        assert_eq!(table.0.len(), 1);
    }
}
