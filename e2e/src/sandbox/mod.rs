//! `accord-sandbox`: a local federation in one command.
//!
//! `up` starts a daemon in a session of its own. The daemon starts a testbed (management
//! cluster and members), installs the hub with `accord-hub install --webhook-url` (the API
//! server calls the admission webhook of the hub on the host, not the Service `install`
//! renders for pods, which has none here), runs `accord-hub serve` on the host as the
//! installed ServiceAccount, joins every member through the real
//! token flow (`accord-hub token create`, then the printed `accord-agent join ... --run`),
//! applies the examples of `deploy/examples/` fitted to the members (first creating the
//! Secrets the FederatedResource examples refer to, with random values, and labelling the
//! members as the examples' selectors expect), waits until every member is Available, the
//! example policy Synced and every example FederatedResource Available in every member,
//! and records itself in `DIR/state.json`. With `--with-prometheus` it also runs, for the example
//! PrometheusFederation, a tenant Prometheus and a federation Prometheus with its reloader
//! in every member and the global Prometheus with its reloader on the management side, and
//! waits until the federation is Synced everywhere and the global Prometheus has series
//! from every member. With `--with-kafka` it runs a Kafka broker in every member, gives
//! each agent its Kafka Secret and waits until the example FederatedKafkaTopic is Synced in
//! every member; with `--with-kafka-sasl` the brokers also listen for SASL_SSL with a
//! SCRAM-SHA-512 user and the agents' Secrets use that listener. `status` reads that file,
//! `/proc` and the management cluster; `down` stops the daemon and waits until every
//! process of its session is gone.

pub mod cli;
pub mod daemon;
pub mod examples;
pub mod procs;
pub mod state;
pub mod status;
