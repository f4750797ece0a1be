//! The hub's state in etcd: keyspace, leader election with fencing, per-policy locks,
//! optimistic-concurrency status records and watch-fed caches.

pub mod keys;

pub use keys::Keyspace;
