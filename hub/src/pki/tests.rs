//! Unit tests of the PKI module.
