//! Ordered maps and sets kept as one sorted vector: what the engine uses where it would reach for
//! `BTreeMap` and `BTreeSet`.
//!
//! Why: size on the Worker. Every `BTreeMap<K, V>` the Worker names costs its own copy of the
//! B-tree (node splits, merges and steals, the iterators, and `from_iter`'s stable sort), about
//! 3–4 KB of wasm each; with a JSON object and twenty other maps that was ~48 KB of the
//! gzipped wasm (benches/README.md, "The sixth cut"). A sorted vector needs a binary search and a
//! `memmove`, and its maps are the engine's usual ones: an envelope's members, a recipient list,
//! an account's balances, a handful to a few thousand entries, read far more than written.
//!
//! The contract is `BTreeMap`'s: iteration in ascending key order, one entry per key, `insert`
//! replacing the value and keeping the key. What differs is cost. Lookups are `O(log n)`; an
//! insert is `O(1)` at the end (input that arrives in order, as canonical JSON and `ORDER BY`
//! rows do) and `O(n)` elsewhere. Building from an iterator never pays `O(n²)`: items arriving
//! out of order are sorted once, by [`sorted_order`], one sort for every map type. A loop of
//! inserts does pay it for items out of order, so what strangers grow one insert at a time is
//! either bounded (a memo, a list) or collected first and built with `from_iter` or
//! [`VecMap::try_from_vec`].

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt;

/// A map from `K` to `V` in ascending key order, stored as a vector of entries.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct VecMap<K, V> {
    entries: Vec<(K, V)>,
}

impl<K, V> Default for VecMap<K, V> {
    fn default() -> Self {
        VecMap::new()
    }
}

impl<K: fmt::Debug, V: fmt::Debug> fmt::Debug for VecMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K, V> VecMap<K, V> {
    pub const fn new() -> Self {
        VecMap { entries: Vec::new() }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// The entries in key order.
    pub fn iter(&self) -> Iter<'_, K, V> {
        Iter(self.entries.iter())
    }

    pub fn iter_mut(&mut self) -> impl DoubleEndedIterator<Item = (&K, &mut V)> + ExactSizeIterator {
        self.entries.iter_mut().map(|(k, v)| (&*k, v))
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &K> + ExactSizeIterator + Clone {
        self.entries.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + ExactSizeIterator + Clone {
        self.entries.iter().map(|(_, v)| v)
    }

    pub fn values_mut(&mut self) -> impl DoubleEndedIterator<Item = &mut V> + ExactSizeIterator {
        self.entries.iter_mut().map(|(_, v)| v)
    }

    pub fn into_keys(self) -> impl DoubleEndedIterator<Item = K> + ExactSizeIterator {
        self.entries.into_iter().map(|(k, _)| k)
    }

    pub fn into_values(self) -> impl DoubleEndedIterator<Item = V> + ExactSizeIterator {
        self.entries.into_iter().map(|(_, v)| v)
    }

    pub fn first_key_value(&self) -> Option<(&K, &V)> {
        self.entries.first().map(|(k, v)| (k, v))
    }

    pub fn last_key_value(&self) -> Option<(&K, &V)> {
        self.entries.last().map(|(k, v)| (k, v))
    }

    /// Keeps the entries `keep` says yes to, in order.
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        self.entries.retain_mut(|(k, v)| keep(k, v));
    }
}

impl<K: Ord, V> VecMap<K, V> {
    /// Where `key` is (`Ok`) or would go (`Err`).
    fn find<Q: Ord + ?Sized>(&self, key: &Q) -> Result<usize, usize>
    where
        K: Borrow<Q>,
    {
        self.entries.binary_search_by(|(k, _)| k.borrow().cmp(key))
    }

    pub fn get<Q: Ord + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        let at = self.find(key).ok()?;
        self.entries.get(at).map(|(_, v)| v)
    }

    pub fn get_mut<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
    {
        let at = self.find(key).ok()?;
        self.entries.get_mut(at).map(|(_, v)| v)
    }

    pub fn contains_key<Q: Ord + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.find(key).is_ok()
    }

    /// Sets `key`'s value; returns the value it replaced. A key already present is kept as it was.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        // Input in key order (canonical JSON, `ORDER BY` rows) goes to the end without a search.
        let at = match self.entries.last() {
            Some((last, _)) if *last < key => self.entries.len(),
            None => 0,
            _ => match self.find(&key) {
                Ok(at) => return self.entries.get_mut(at).map(|(_, v)| std::mem::replace(v, value)),
                Err(at) => at,
            },
        };
        self.entries.insert(at, (key, value));
        None
    }

    pub fn remove<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        let at = self.find(key).ok()?;
        Some(self.entries.remove(at).1)
    }

    /// The slot for `key`, to read, fill or change in one search.
    pub fn entry(&mut self, key: K) -> Entry<'_, K, V> {
        let at = match self.find(&key) {
            Ok(at) => at,
            Err(at) => return Entry::Vacant(VacantEntry { entries: &mut self.entries, at, key }),
        };
        match self.entries.get_mut(at) {
            Some((key, value)) => Entry::Occupied(OccupiedEntry { key, value }),
            None => unreachable!("`find` found the key at {at}"),
        }
    }

    /// Builds the map from entries in any order. When two share a key, the later one stays, as
    /// with repeated [`insert`](Self::insert)s (but the later key is the one kept).
    fn from_vec(entries: Vec<(K, V)>) -> Self {
        let Some(order) = Self::order_of(&entries) else {
            return VecMap { entries };
        };
        // Of each run of equal keys (in arrival order, since ties keep it) only the last stays.
        let mut keep = vec![true; entries.len()];
        for pair in order.windows(2) {
            if let [at, next] = *pair
                && Self::same_key(&entries, at, next)
                && let Some(slot) = keep.get_mut(at)
            {
                *slot = false;
            }
        }
        Self::permuted(entries, &order, &keep)
    }

    /// Builds the map from entries in any order whose keys are all distinct; if two are not, the
    /// first entry whose key an earlier one already has: its position in `entries`, and its key.
    pub fn try_from_vec(entries: Vec<(K, V)>) -> Result<Self, (usize, K)> {
        let Some(order) = Self::order_of(&entries) else {
            return Ok(VecMap { entries });
        };
        // Equal keys sit together in `order`, each run in arrival order: the second of a run is
        // its first repeat.
        let first_repeat = order
            .windows(2)
            .filter_map(|pair| match *pair {
                [at, next] if Self::same_key(&entries, at, next) => Some(next),
                _ => None,
            })
            .min();
        match first_repeat {
            Some(at) => match entries.into_iter().nth(at) {
                Some((key, _)) => Err((at, key)),
                None => unreachable!("{at} is a position in `entries`"),
            },
            None => Ok(Self::permuted(entries, &order, &vec![true; order.len()])),
        }
    }

    /// `None` when `entries` is already strictly ascending, else the order that sorts it.
    fn order_of(entries: &[(K, V)]) -> Option<Vec<usize>> {
        if entries.windows(2).all(|w| matches!(w, [a, b] if a.0 < b.0)) {
            return None;
        }
        // Ties keep arrival order (the sort is stable), which the callers rely on.
        Some(sorted_order(entries.len(), &|a, b| match (entries.get(a), entries.get(b)) {
            (Some(x), Some(y)) => x.0.cmp(&y.0),
            _ => Ordering::Equal,
        }))
    }

    fn same_key(entries: &[(K, V)], a: usize, b: usize) -> bool {
        matches!((entries.get(a), entries.get(b)), (Some(x), Some(y)) if x.0 == y.0)
    }

    /// The entries in `order`, but those `keep` says no to.
    fn permuted(entries: Vec<(K, V)>, order: &[usize], keep: &[bool]) -> Self {
        let kept = order.iter().copied().filter(|&at| keep.get(at).copied().unwrap_or(false));
        VecMap { entries: take_in(entries, kept) }
    }
}

/// `items` sorted by `cmp`, stably, through [`sorted_order`] (no sort instantiated for `T`).
pub fn sort_by<T>(items: Vec<T>, cmp: impl Fn(&T, &T) -> Ordering) -> Vec<T> {
    let order = sorted_order(items.len(), &|a, b| match (items.get(a), items.get(b)) {
        (Some(x), Some(y)) => cmp(x, y),
        _ => Ordering::Equal,
    });
    take_in(items, order.into_iter())
}

/// The items at the positions `order` names, in that order (each position at most once).
fn take_in<T>(items: Vec<T>, order: impl Iterator<Item = usize>) -> Vec<T> {
    let mut slots: Vec<Option<T>> = items.into_iter().map(Some).collect();
    order.filter_map(|at| slots.get_mut(at).and_then(Option::take)).collect()
}

/// The order that sorts `n` items by `cmp`, stable (equal items keep their given order), as
/// positions: item `order[0]` comes first. One sort serves every map and set type and every other
/// sort the engine makes, which is the point: the standard library's sorts are a few KB of wasm
/// per element type. A bottom-up merge sort: `n log n` comparisons at most, one buffer.
pub fn sorted_order(n: usize, cmp: &dyn Fn(usize, usize) -> Ordering) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut merged: Vec<usize> = Vec::with_capacity(n);
    let mut width = 1;
    while width < n {
        merged.clear();
        for run in order.chunks(2 * width) {
            let (mut left, mut right) = run.split_at(width.min(run.len()));
            // Take from the right only when strictly less, so equal items keep their order.
            while let ([a, rest_a @ ..], [b, rest_b @ ..]) = (left, right) {
                if cmp(*b, *a) == Ordering::Less {
                    merged.push(*b);
                    right = rest_b;
                } else {
                    merged.push(*a);
                    left = rest_a;
                }
            }
            merged.extend_from_slice(left);
            merged.extend_from_slice(right);
        }
        std::mem::swap(&mut order, &mut merged);
        width *= 2;
    }
    order
}

/// `map[key]`, as `BTreeMap` has it: panics when `key` is absent. For tests and for keys the
/// code has just put there; what input reaches goes through [`VecMap::get`].
impl<K: Ord + Borrow<Q>, Q: Ord + ?Sized, V> std::ops::Index<&Q> for VecMap<K, V> {
    type Output = V;
    #[allow(clippy::panic)] // the documented contract of `Index`, as `BTreeMap`'s
    fn index(&self, key: &Q) -> &V {
        match self.get(key) {
            Some(value) => value,
            None => panic!("no such key in the map"),
        }
    }
}

impl<K: Ord, V> FromIterator<(K, V)> for VecMap<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(items: I) -> Self {
        VecMap::from_vec(items.into_iter().collect())
    }
}

impl<K: Ord, V, const N: usize> From<[(K, V); N]> for VecMap<K, V> {
    fn from(items: [(K, V); N]) -> Self {
        VecMap::from_vec(Vec::from(items))
    }
}

/// As one `insert` per item (a later value replaces an earlier one), but sorted once.
impl<K: Ord, V> Extend<(K, V)> for VecMap<K, V> {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, items: I) {
        let mut entries = std::mem::take(&mut self.entries);
        entries.extend(items);
        *self = VecMap::from_vec(entries);
    }
}

impl<K, V> IntoIterator for VecMap<K, V> {
    type Item = (K, V);
    type IntoIter = std::vec::IntoIter<(K, V)>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl<'a, K, V> IntoIterator for &'a VecMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = Iter<'a, K, V>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// The entries of a [`VecMap`], in key order.
#[derive(Clone, Debug)]
pub struct Iter<'a, K, V>(std::slice::Iter<'a, (K, V)>);

impl<'a, K, V> Iterator for Iter<'a, K, V> {
    type Item = (&'a K, &'a V);
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(k, v)| (k, v))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl<K, V> DoubleEndedIterator for Iter<'_, K, V> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back().map(|(k, v)| (k, v))
    }
}

impl<K, V> ExactSizeIterator for Iter<'_, K, V> {}

/// A slot of a [`VecMap`], found by [`VecMap::entry`].
#[derive(Debug)]
pub enum Entry<'a, K, V> {
    Vacant(VacantEntry<'a, K, V>),
    Occupied(OccupiedEntry<'a, K, V>),
}

#[derive(Debug)]
pub struct VacantEntry<'a, K, V> {
    entries: &'a mut Vec<(K, V)>,
    at: usize,
    key: K,
}

#[derive(Debug)]
pub struct OccupiedEntry<'a, K, V> {
    key: &'a K,
    value: &'a mut V,
}

impl<'a, K, V> VacantEntry<'a, K, V> {
    pub fn key(&self) -> &K {
        &self.key
    }

    pub fn insert(self, value: V) -> &'a mut V {
        // `Vec::insert_mut` would say this in one call, from Rust 1.95 (the MSRV is 1.91).
        let VacantEntry { entries, at, key } = self;
        entries.insert(at, (key, value));
        match entries.get_mut(at) {
            Some((_, v)) => v,
            None => unreachable!("the entry was just put at {at}"),
        }
    }
}

impl<'a, K, V> OccupiedEntry<'a, K, V> {
    pub fn key(&self) -> &K {
        self.key
    }

    pub fn get(&self) -> &V {
        self.value
    }

    pub fn get_mut(&mut self) -> &mut V {
        self.value
    }

    pub fn into_mut(self) -> &'a mut V {
        self.value
    }

    pub fn insert(&mut self, value: V) -> V {
        std::mem::replace(self.value, value)
    }
}

impl<'a, K: Ord, V> Entry<'a, K, V> {
    pub fn or_insert(self, default: V) -> &'a mut V {
        self.or_insert_with(|| default)
    }

    pub fn or_insert_with(self, default: impl FnOnce() -> V) -> &'a mut V {
        match self {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(v) => v.insert(default()),
        }
    }

    pub fn or_default(self) -> &'a mut V
    where
        V: Default,
    {
        self.or_insert_with(V::default)
    }

    pub fn and_modify(mut self, change: impl FnOnce(&mut V)) -> Self {
        if let Entry::Occupied(o) = &mut self {
            change(o.get_mut());
        }
        self
    }

    pub fn key(&self) -> &K {
        match self {
            Entry::Occupied(o) => o.key(),
            Entry::Vacant(v) => v.key(),
        }
    }
}

/// A set of `T` in ascending order, stored as a sorted vector.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct VecSet<T> {
    map: VecMap<T, ()>,
}

impl<T> Default for VecSet<T> {
    fn default() -> Self {
        VecSet::new()
    }
}

impl<T: fmt::Debug> fmt::Debug for VecSet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl<T> VecSet<T> {
    pub const fn new() -> Self {
        VecSet { map: VecMap::new() }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + ExactSizeIterator + Clone {
        self.map.keys()
    }

    pub fn first(&self) -> Option<&T> {
        self.map.first_key_value().map(|(k, _)| k)
    }

    pub fn last(&self) -> Option<&T> {
        self.map.last_key_value().map(|(k, _)| k)
    }
}

impl<T: Ord> VecSet<T> {
    /// Adds `value`; whether it was not there before.
    pub fn insert(&mut self, value: T) -> bool {
        match self.map.entry(value) {
            Entry::Occupied(_) => false,
            Entry::Vacant(slot) => {
                slot.insert(());
                true
            }
        }
    }

    pub fn contains<Q: Ord + ?Sized>(&self, value: &Q) -> bool
    where
        T: Borrow<Q>,
    {
        self.map.contains_key(value)
    }

    pub fn remove<Q: Ord + ?Sized>(&mut self, value: &Q) -> bool
    where
        T: Borrow<Q>,
    {
        self.map.remove(value).is_some()
    }

    /// The members also in `other`, in order.
    pub fn intersection<'a>(&'a self, other: &'a VecSet<T>) -> impl Iterator<Item = &'a T> {
        self.iter().filter(|t| other.contains(*t))
    }

    /// The members not in `other`, in order.
    pub fn difference<'a>(&'a self, other: &'a VecSet<T>) -> impl Iterator<Item = &'a T> {
        self.iter().filter(|t| !other.contains(*t))
    }

    pub fn is_subset(&self, other: &VecSet<T>) -> bool {
        self.iter().all(|t| other.contains(t))
    }
}

impl<T: Ord> FromIterator<T> for VecSet<T> {
    fn from_iter<I: IntoIterator<Item = T>>(items: I) -> Self {
        VecSet { map: items.into_iter().map(|t| (t, ())).collect() }
    }
}

impl<T: Ord, const N: usize> From<[T; N]> for VecSet<T> {
    fn from(items: [T; N]) -> Self {
        items.into_iter().collect()
    }
}

impl<T> IntoIterator for VecSet<T> {
    type Item = T;
    type IntoIter = std::iter::Map<std::vec::IntoIter<(T, ())>, fn((T, ())) -> T>;
    fn into_iter(self) -> Self::IntoIter {
        self.map.entries.into_iter().map(|(t, ())| t)
    }
}

impl<'a, T> IntoIterator for &'a VecSet<T> {
    type Item = &'a T;
    type IntoIter = std::iter::Map<std::slice::Iter<'a, (T, ())>, fn(&'a (T, ())) -> &'a T>;
    fn into_iter(self) -> Self::IntoIter {
        self.map.entries.iter().map(|(t, ())| t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    /// A small deterministic generator, so the model comparison needs no crate.
    fn lcg(state: &mut u64) -> u64 {
        *state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        *state >> 33
    }

    #[test]
    fn behaves_as_a_btreemap_under_random_operations() {
        for seed in 0..200u64 {
            let mut state = seed;
            let mut ours: VecMap<String, u64> = VecMap::new();
            let mut model: BTreeMap<String, u64> = BTreeMap::new();
            for step in 0..300 {
                let key = format!("k{}", lcg(&mut state) % 40);
                match lcg(&mut state) % 6 {
                    0 | 1 => assert_eq!(ours.insert(key.clone(), step), model.insert(key, step)),
                    2 => assert_eq!(ours.remove(key.as_str()), model.remove(key.as_str())),
                    3 => {
                        *ours.entry(key.clone()).or_insert(0) += step;
                        *model.entry(key).or_insert(0) += step;
                    }
                    4 => {
                        let keep = lcg(&mut state) % 3;
                        ours.retain(|_, v| *v % 3 != keep);
                        model.retain(|_, v| *v % 3 != keep);
                    }
                    _ => {
                        assert_eq!(ours.get(key.as_str()), model.get(key.as_str()));
                        assert_eq!(ours.contains_key(key.as_str()), model.contains_key(key.as_str()));
                    }
                }
                assert_eq!(ours.len(), model.len());
            }
            let ours: Vec<_> = ours.into_iter().collect();
            let model: Vec<_> = model.into_iter().collect();
            assert_eq!(ours, model, "seed {seed}");
        }
    }

    #[test]
    fn built_from_any_order_it_is_sorted_and_the_last_duplicate_wins() {
        for seed in 0..200u64 {
            let mut state = seed;
            let items: Vec<(u64, u64)> = (0..lcg(&mut state) % 60).map(|i| (lcg(&mut state) % 25, i)).collect();
            let ours: VecMap<u64, u64> = items.iter().copied().collect();
            let model: BTreeMap<u64, u64> = items.iter().copied().collect();
            assert_eq!(ours.iter().collect::<Vec<_>>(), model.iter().collect::<Vec<_>>(), "seed {seed}");
            let set: VecSet<u64> = items.iter().map(|(k, _)| *k).collect();
            let model: BTreeSet<u64> = items.iter().map(|(k, _)| *k).collect();
            assert_eq!(set.iter().collect::<Vec<_>>(), model.iter().collect::<Vec<_>>());
        }
    }

    #[test]
    fn sorted_order_is_a_stable_sort() {
        for seed in 0..300u64 {
            let mut state = seed;
            let items: Vec<u64> = (0..lcg(&mut state) % 70).map(|_| lcg(&mut state) % 9).collect();
            let order = sorted_order(items.len(), &|a, b| items[a].cmp(&items[b]));
            let mut model: Vec<usize> = (0..items.len()).collect();
            model.sort_by_key(|&i| items[i]);
            assert_eq!(order, model, "seed {seed}: {items:?}");
        }
        assert_eq!(sorted_order(0, &|_, _| Ordering::Equal), Vec::<usize>::new());
        assert_eq!(sorted_order(3, &|a, b| b.cmp(&a)), vec![2, 1, 0]);
        let words = vec!["pear", "fig", "apple", "kiwi", "plum"];
        assert_eq!(sort_by(words, |a, b| a.len().cmp(&b.len())), vec!["fig", "pear", "kiwi", "plum", "apple"]);
    }

    #[test]
    fn distinct_keys_or_the_first_repeat() {
        let ok = VecMap::try_from_vec(vec![("b", 1), ("c", 2), ("a", 3)]);
        assert_eq!(ok.map(|m| m.into_iter().collect::<Vec<_>>()), Ok(vec![("a", 3), ("b", 1), ("c", 2)]));
        assert_eq!(VecMap::try_from_vec(vec![("a", 1), ("b", 2)]).map(|m| m.len()), Ok(2));
        // `c` repeats at 4 and `b` at 3: the first repeat in arrival order is 3.
        let twice = vec![("c", 0), ("b", 1), ("a", 2), ("b", 3), ("c", 4), ("b", 5)];
        assert_eq!(VecMap::try_from_vec(twice).err(), Some((3, "b")));
        assert_eq!(VecMap::try_from_vec(vec![("a", 1), ("a", 2)]).err(), Some((1, "a")));
    }

    #[test]
    fn a_reversed_build_is_sorted_once_not_inserted_one_by_one() {
        // 200,000 keys in descending order: one insert each would move ~2·10¹⁰ entries.
        let map: VecMap<u32, ()> = (0..200_000u32).rev().map(|k| (k, ())).collect();
        assert_eq!(map.len(), 200_000);
        assert!(map.keys().copied().eq(0..200_000));
    }

    #[test]
    fn entries_read_change_and_leave() {
        let mut map = VecMap::from([("b", 2), ("a", 1)]);
        assert_eq!(map.entry("c").key(), &"c");
        assert_eq!(*map.entry("a").and_modify(|v| *v += 10).or_insert(0), 11);
        assert_eq!(*map.entry("c").and_modify(|v| *v += 10).or_default(), 0);
        match map.entry("b") {
            Entry::Occupied(mut o) => {
                assert_eq!(o.insert(20), 2);
                assert_eq!(o.get(), &20);
            }
            Entry::Vacant(_) => panic!("b is there"),
        }
        assert_eq!(map.remove("b"), Some(20));
        assert_eq!(map.iter().collect::<Vec<_>>(), vec![(&"a", &11), (&"c", &0)]);
        assert_eq!(map.iter().len(), 2);
        assert_eq!(map.iter().rev().collect::<Vec<_>>(), vec![(&"c", &0), (&"a", &11)]);
        map.extend([("d", 4), ("a", 1), ("b", 2), ("a", 5)]);
        assert_eq!(map.iter().collect::<Vec<_>>(), vec![(&"a", &5), (&"b", &2), (&"c", &0), (&"d", &4)]);
        map.retain(|k, _| *k != "b" && *k != "d");
        assert_eq!(map.first_key_value(), Some((&"a", &5)));
        *map.get_mut("a").unwrap() = 11;
        assert_eq!(map.last_key_value(), Some((&"c", &0)));
        assert_eq!(format!("{map:?}"), r#"{"a": 11, "c": 0}"#);
    }

    #[test]
    fn sets_insert_once_and_compare() {
        let mut set = VecSet::from([3, 1, 2]);
        assert_eq!((set.len(), set.is_empty()), (3, false));
        assert_eq!((VecSet::<u8>::new().len(), VecSet::<u8>::new().is_empty()), (0, true));
        assert!(!set.insert(2));
        assert!(set.insert(0));
        assert!(set.remove(&1));
        assert!(!set.remove(&1));
        let other = VecSet::from([2, 5]);
        assert_eq!(set.intersection(&other).collect::<Vec<_>>(), vec![&2]);
        assert_eq!(set.difference(&other).collect::<Vec<_>>(), vec![&0, &3]);
        assert!(VecSet::from([2]).is_subset(&other));
        assert!(!set.is_subset(&other));
        assert_eq!(set.first(), Some(&0));
        assert_eq!(set.last(), Some(&3));
        assert_eq!(format!("{set:?}"), "{0, 2, 3}");
    }
}
