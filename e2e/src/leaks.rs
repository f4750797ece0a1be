//! Where a secret could leak on the testbed, read back for tests that prove it does not:
//! every key and value of a hub's etcd keyspace and every line of every component log.

use anyhow::Result;

use crate::Testbed;

/// Every key and value of a hub's etcd keyspace (`prefix`; compressed records read back),
/// as text.
pub async fn hub_etcd_dump(testbed: &Testbed, prefix: &str) -> Result<Vec<(String, String)>> {
    let mut client = testbed.hub_etcd_client().await?;
    let all = client
        .get(prefix, Some(etcd_client::GetOptions::new().with_prefix()))
        .await?;
    Ok(all
        .kvs()
        .iter()
        .map(|kv| {
            let value = kv.value();
            let value = if accord_common::compress::is_gzip(value) {
                accord_common::compress::gunzip(value).unwrap_or_default()
            } else {
                value.to_vec()
            };
            (
                String::from_utf8_lossy(kv.key()).into_owned(),
                String::from_utf8_lossy(&value).into_owned(),
            )
        })
        .collect())
}

/// Every line of every component log of the testbed that contains `needle`.
pub fn logged(testbed: &Testbed, needle: &str) -> Result<Vec<String>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(testbed.dir().join("logs"))? {
        let path = entry?.path();
        let text = String::from_utf8_lossy(&std::fs::read(&path)?).into_owned();
        found.extend(
            text.lines()
                .filter(|l| l.contains(needle))
                .map(|l| format!("{}: {l}", path.display())),
        );
    }
    Ok(found)
}
