//! `docs/crd-reference.md` must be exactly what `accord_crds::reference::markdown()` renders
//! from the CRD schemas. Regenerate it with
//! `ACCORD_UPDATE_DOCS=1 cargo test -p accord-crds --test reference`.

use accord_crds::reference::{DOC_PATH, REGENERATE_COMMAND, markdown};

#[test]
fn committed_crd_reference_matches_the_schemas() {
    let path = accord_crds::testdata::repo_root().join(DOC_PATH);
    let generated = markdown();
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if std::env::var("ACCORD_UPDATE_DOCS").as_deref() == Ok("1") {
        if committed != generated {
            std::fs::write(&path, &generated)
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        }
        return;
    }
    if generated == committed {
        return;
    }
    let first_difference = generated
        .lines()
        .zip(committed.lines())
        .enumerate()
        .find(|(_, (g, c))| g != c)
        .map(|(i, (g, c))| format!("line {}:\n  generated: {g}\n  committed: {c}", i + 1))
        .unwrap_or_else(|| {
            format!(
                "one is a prefix of the other: generated has {} lines, committed {}",
                generated.lines().count(),
                committed.lines().count()
            )
        });
    panic!(
        "{DOC_PATH} is out of date with the CRD schemas (or missing).\n\
         Regenerate it: {REGENERATE_COMMAND}\n\
         first difference, {first_difference}"
    );
}
