//! One rule for the memory a table, set or queue keeps: [`give_back`].

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// A table, set or queue larger than this gives its memory back once it holds less than a
/// quarter of its capacity: a burst (every object at a start, a re-list, the hourly resync) grows
/// it to the number of objects, and a hash table never shrinks by itself.
pub const KEPT_CAPACITY: usize = 1024;

/// What holds memory by capacity.
pub trait Capacity {
    fn len(&self) -> usize;
    fn capacity(&self) -> usize;
    fn shrink_to_fit(&mut self);
}

/// Implements [`Capacity`] by the collection's own methods of those names.
macro_rules! by_its_own_methods {
    ($($kept:ty where [$($generics:tt)*];)*) => {$(
        impl<$($generics)*> Capacity for $kept {
            fn len(&self) -> usize {
                self.len()
            }
            fn capacity(&self) -> usize {
                self.capacity()
            }
            fn shrink_to_fit(&mut self) {
                self.shrink_to_fit()
            }
        }
    )*};
}

by_its_own_methods! {
    HashMap<K, V> where [K: Eq + Hash, V];
    VecDeque<T> where [T];
}

/// Shrinks `kept` under the rule of [`KEPT_CAPACITY`]; whether it did.
pub fn give_back(kept: &mut impl Capacity) -> bool {
    let shrink = kept.capacity() > KEPT_CAPACITY && kept.capacity() / 4 > kept.len();
    if shrink {
        kept.shrink_to_fit();
    }
    shrink
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_goes_back_only_past_the_kept_size_and_below_a_quarter() {
        let mut map: HashMap<usize, ()> = (0..4 * KEPT_CAPACITY).map(|i| (i, ())).collect();
        map.retain(|i, _| *i < KEPT_CAPACITY);
        assert!(give_back(&mut map), "{} of {}", map.len(), map.capacity());
        assert!(map.capacity() < 2 * KEPT_CAPACITY);
        let mut small: HashMap<usize, ()> = HashMap::with_capacity(KEPT_CAPACITY / 2);
        assert!(!give_back(&mut small), "never below the kept size");
        let mut full: HashMap<usize, ()> = (0..4 * KEPT_CAPACITY).map(|i| (i, ())).collect();
        assert!(!give_back(&mut full), "a full one keeps its room");
    }
}
