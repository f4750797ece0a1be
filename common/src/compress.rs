//! gzip for values kept where their size is bounded: the hub's placement records in etcd
//! (1.5 MiB per request by default) and an agent's saved assignments in a ConfigMap (1 MiB).
//! Their JSON repeats the same field names and values for every cluster or topic, so it
//! compresses many times over.

use std::io::{Read as _, Write as _};

/// The start of a gzip stream; no JSON document starts with it.
pub const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
/// The most a compressed value may inflate to: a guard against a corrupt or hostile one.
pub const MAX_INFLATED_BYTES: u64 = 256 * 1024 * 1024;

/// Whether `bytes` is a gzip stream.
pub fn is_gzip(bytes: &[u8]) -> bool {
    bytes.starts_with(&GZIP_MAGIC)
}

/// `bytes` gzip-compressed (fast level: these are written often and read rarely).
pub fn gzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut gz = flate2::write::GzEncoder::new(
        Vec::with_capacity(bytes.len() / 8),
        flate2::Compression::fast(),
    );
    gz.write_all(bytes)?;
    gz.finish()
}

/// The bytes a gzip stream holds; an error when it is not one, or inflates to more than
/// [`MAX_INFLATED_BYTES`].
pub fn gunzip(compressed: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(compressed)
        .take(MAX_INFLATED_BYTES + 1)
        .read_to_end(&mut out)?;
    if out.len() as u64 > MAX_INFLATED_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("inflates to more than {MAX_INFLATED_BYTES} bytes"),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_round_trips_and_is_told_apart_from_json() {
        let json = br#"{"topics":[{"name":"orders","partitions":3}]}"#.repeat(100);
        let compressed = gzip(&json).unwrap();
        assert!(is_gzip(&compressed));
        assert!(!is_gzip(&json));
        assert!(
            compressed.len() * 10 < json.len(),
            "{} bytes",
            compressed.len()
        );
        assert_eq!(gunzip(&compressed).unwrap(), json);
    }

    #[test]
    fn what_is_not_gzip_is_an_error() {
        assert!(gunzip(b"{\"a\":1}").is_err());
        let mut cut = gzip(b"hello hello hello").unwrap();
        cut.truncate(cut.len() / 2);
        assert!(gunzip(&cut).is_err());
    }
}
