//! Markdown reference of every Accord CRD, rendered from the generated
//! `CustomResourceDefinition` objects rather than written by hand, so it states exactly what
//! the API server enforces: types, defaults, bounds, enums, required fields and the CEL rules
//! with their messages. Committed as `docs/crd-reference.md`; `tests/reference.rs` fails when
//! the committed file drifts from [`markdown`].

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionVersion, JSONSchemaProps,
    JSONSchemaPropsOrArray, JSONSchemaPropsOrBool, ValidationRule,
};

/// Where the rendered reference is committed, relative to the repository root.
pub const DOC_PATH: &str = "docs/crd-reference.md";

/// The command that rewrites [`DOC_PATH`] from the current schemas.
pub const REGENERATE_COMMAND: &str =
    "ACCORD_UPDATE_DOCS=1 cargo test -p accord-crds --test reference";

/// The reference of every CRD in [`crate::all_crds`], as committed in [`DOC_PATH`].
pub fn markdown() -> String {
    render(&crate::all_crds())
}

/// Renders a reference of the given CRDs. Output depends only on the CRDs: properties come
/// in the schema's (sorted) order and nothing reads the clock or the environment.
pub fn render(crds: &[CustomResourceDefinition]) -> String {
    let mut out = String::new();
    line(&mut out, "# CRD reference");
    line(&mut out, "");
    line(
        &mut out,
        &format!(
            "> Generated from the CRD schemas by `accord_crds::reference::markdown()`; do not \
             edit by hand. Regenerate with `{REGENERATE_COMMAND}`."
        ),
    );
    line(&mut out, "");
    line(
        &mut out,
        "Everything below comes from the OpenAPI schemas and `x-kubernetes-validations` (CEL) \
         rules that the API server enforces, so a rejected object is answered with one of the \
         messages listed here. In field paths, `[]` stands for every item of a list and \
         `<key>` for every value of a map. *Required* means the field must be set whenever \
         its parent object is; a *default* is filled in by the API server when the field is \
         left out.",
    );
    line(&mut out, "");
    line(&mut out, "| Kind | Short names | Scope | API version |");
    line(&mut out, "|---|---|---|---|");
    for crd in crds {
        let names = &crd.spec.names;
        let versions: Vec<&str> = crd.spec.versions.iter().map(|v| v.name.as_str()).collect();
        line(
            &mut out,
            &format!(
                "| [{kind}](#{anchor}) | {short} | {scope} | {api} |",
                kind = names.kind,
                anchor = names.kind.to_lowercase(),
                short = code_list(names.short_names.as_deref().unwrap_or_default()),
                scope = crd.spec.scope,
                api = versions
                    .iter()
                    .map(|v| code(&format!("{}/{v}", crd.spec.group)))
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
        );
    }
    line(&mut out, "");
    out.push_str(VERSION_CHANGES);
    for crd in crds {
        render_crd(&mut out, crd);
    }
    out
}

/// What changed from `v1alpha1` to `v1beta1`: the conversion webhook's rules
/// ([`crate::conversion`]) in words.
const VERSION_CHANGES: &str = "\
## v1alpha1 → v1beta1

`v1beta1` is the storage version and the one the hub reads; `v1alpha1` is still served, \
deprecated (`kubectl` prints a warning), with its schema frozen as it was. The hub's conversion \
webhook converts between them both ways without loss: a field one version lacks travels in the \
annotation `accord.io/v1beta1-fields` and is restored. The changes:

- Every kind: `apiVersion: accord.io/v1alpha1` → `accord.io/v1beta1`.
- FederatedKafkaTopic, PrometheusFederation, FederatedResource, FederatedKafkaUser: \
`spec.clusters` → `spec.placement.clusters`, `spec.clusterSelector` → \
`spec.placement.clusterSelector` (one placement shape for every kind; FederatedResource's \
`overrides[].clusters`/`clusterSelector` stay where they are).
- FederatedKafkaUser: `spec.username` → `spec.userName` (named like FederatedKafkaTopic's \
`topicName`).
- CrossClusterScalePolicy: new optional `spec.placement` (`clusters` or `clusterSelector`). \
Without it `spec.distribution` lists the clusters, as in v1alpha1; with it the workload runs \
in the placed clusters, a `distribution` entry gives a placed cluster its weight, replica \
bounds and namespace, and a placed cluster without one has weight 1. A v1alpha1 client sees \
the placement only in the annotation.
- KafkaTopicPolicy, ManagedCluster: unchanged but for the version.

Moving stored objects to v1beta1: `accord-hub migrate-storage` (docs/operations.md, \
\"Upgrading\").
";

/// One kind: names, then per version its printer columns and schema.
fn render_crd(out: &mut String, crd: &CustomResourceDefinition) {
    let spec = &crd.spec;
    let names = &spec.names;
    line(out, "");
    line(out, &format!("## {}", names.kind));
    line(out, "");
    let root_description = spec
        .versions
        .iter()
        .find_map(|v| root_schema(v).and_then(|s| s.description.as_deref()));
    if let Some(description) = root_description {
        line(out, &text(description, false));
        line(out, "");
    }
    let list_kind = names
        .list_kind
        .clone()
        .unwrap_or_else(|| format!("{}List", names.kind));
    let singular = names
        .singular
        .clone()
        .unwrap_or_else(|| names.kind.to_lowercase());
    line(out, "| | |");
    line(out, "|---|---|");
    line(out, &format!("| Group | {} |", code(&spec.group)));
    let versions: Vec<String> = spec
        .versions
        .iter()
        .map(|v| {
            let mut s = code(&v.name);
            if v.storage {
                s.push_str(" (storage)");
            }
            if !v.served {
                s.push_str(" (not served)");
            }
            if v.deprecated == Some(true) {
                s.push_str(" (deprecated)");
            }
            s
        })
        .collect();
    line(out, &format!("| Versions | {} |", versions.join(", ")));
    line(
        out,
        &format!(
            "| Kind | {} (list: {}) |",
            code(&names.kind),
            code(&list_kind)
        ),
    );
    line(
        out,
        &format!(
            "| Plural / singular | {} / {} |",
            code(&names.plural),
            code(&singular)
        ),
    );
    line(out, &format!("| Scope | {} |", spec.scope));
    line(
        out,
        &format!(
            "| Short names | {} |",
            code_list(names.short_names.as_deref().unwrap_or_default())
        ),
    );
    line(
        out,
        &format!(
            "| Categories | {} |",
            code_list(names.categories.as_deref().unwrap_or_default())
        ),
    );
    for version in &spec.versions {
        line(
            out,
            &format!(
                "| Subresources{} | {} |",
                version_suffix(spec.versions.len(), &version.name),
                subresources(version)
            ),
        );
    }
    for version in &spec.versions {
        render_version(out, spec.versions.len(), version);
    }
}

/// Printer columns and the schema of one version.
fn render_version(
    out: &mut String,
    version_count: usize,
    version: &CustomResourceDefinitionVersion,
) {
    let suffix = version_suffix(version_count, &version.name);
    if let Some(warning) = &version.deprecation_warning {
        line(out, "");
        line(out, &format!("Deprecated: {}", text(warning, false)));
    }
    let columns = version
        .additional_printer_columns
        .as_deref()
        .unwrap_or_default();
    if !columns.is_empty() {
        line(out, "");
        line(out, &format!("### Printer columns{suffix}"));
        line(out, "");
        line(out, "| Column | Type | JSON path | Shown | Description |");
        line(out, "|---|---|---|---|---|");
        for c in columns {
            let ty = match &c.format {
                Some(format) => format!("{} ({format})", c.type_),
                None => c.type_.clone(),
            };
            let shown = if c.priority.unwrap_or(0) > 0 {
                "with `-o wide`"
            } else {
                "always"
            };
            line(
                out,
                &format!(
                    "| {} | {} | {} | {shown} | {} |",
                    text(&c.name, true),
                    text(&ty, true),
                    cell_code(&c.json_path),
                    c.description
                        .as_deref()
                        .map(|d| text(d, true))
                        .unwrap_or_default(),
                ),
            );
        }
    }
    let Some(root) = root_schema(version) else {
        line(out, "");
        line(out, "This version has no schema.");
        return;
    };
    for section in sections(root) {
        render_section(out, &section, &suffix);
    }
}

/// ` (v1)` when a CRD has several versions, so headings stay unambiguous; nothing otherwise.
fn version_suffix(version_count: usize, version: &str) -> String {
    if version_count > 1 {
        format!(" ({version})")
    } else {
        String::new()
    }
}

fn root_schema(version: &CustomResourceDefinitionVersion) -> Option<&JSONSchemaProps> {
    version.schema.as_ref()?.open_api_v3_schema.as_ref()
}

fn subresources(version: &CustomResourceDefinitionVersion) -> String {
    let Some(sub) = &version.subresources else {
        return "none".to_owned();
    };
    let mut parts = Vec::new();
    if sub.status.is_some() {
        parts.push("`status`".to_owned());
    }
    if let Some(scale) = &sub.scale {
        parts.push(format!(
            "`scale` (spec {}, status {})",
            code(&scale.spec_replicas_path),
            code(&scale.status_replicas_path)
        ));
    }
    if parts.is_empty() {
        "none".to_owned()
    } else {
        parts.join(", ")
    }
}

/// One object level of a schema: its own fields as rows, and every validation rule that
/// applies at this level (on the object itself, or on a field that has no section of its own).
#[derive(Debug)]
struct Section {
    /// Field path of the object, e.g. `spec.distribution[]`; empty for the top level.
    path: String,
    /// Whether the object must be set (only known, and shown, for top-level objects).
    required: Option<bool>,
    description: Option<String>,
    rows: Vec<Row>,
    rules: Vec<(String, ValidationRule)>,
}

/// One field of an object.
#[derive(Debug)]
struct Row {
    path: String,
    type_name: String,
    required: bool,
    default: Option<String>,
    constraints: Vec<String>,
    description: Option<String>,
}

/// Every object level of a CRD's root schema, depth first: `spec` and everything in it, then
/// `status` and everything in it. A top-level section lists fields of the root itself that are
/// not objects (none in Accord's kinds) and the root's own rules, and is left out when empty.
fn sections(root: &JSONSchemaProps) -> Vec<Section> {
    let mut out = Vec::new();
    let mut top = Section {
        path: String::new(),
        required: None,
        description: None,
        rows: Vec::new(),
        rules: rules_of("", root),
    };
    let mut children = Vec::new();
    let required = root.required.as_deref().unwrap_or_default();
    for (name, prop) in root.properties.iter().flatten() {
        let is_required = required.contains(name);
        if has_properties(prop) {
            children.push((name.clone(), prop, is_required));
        } else {
            top.rows.push(row(name, prop, is_required));
            inline(name, prop, &mut top.rules, &mut Vec::new());
        }
    }
    if !top.rows.is_empty() || !top.rules.is_empty() {
        out.push(top);
    }
    for (name, prop, is_required) in children {
        walk(&name, prop, Some(is_required), &mut out);
    }
    out
}

/// Pushes the section of one object (which has properties), then those of the objects
/// nested in it.
fn walk(path: &str, schema: &JSONSchemaProps, required: Option<bool>, out: &mut Vec<Section>) {
    let mut section = Section {
        path: path.to_owned(),
        required,
        description: schema.description.clone(),
        rows: Vec::new(),
        rules: rules_of(path, schema),
    };
    let mut children = Vec::new();
    let required_fields = schema.required.as_deref().unwrap_or_default();
    for (name, prop) in schema.properties.iter().flatten() {
        let field = format!("{path}.{name}");
        section
            .rows
            .push(row(&field, prop, required_fields.contains(name)));
        inline(&field, prop, &mut section.rules, &mut children);
    }
    out.push(section);
    for (child_path, child) in children {
        walk(&child_path, child, None, out);
    }
}

/// Collects the rules of a field that has no section of its own into its parent's section,
/// following lists (`[]`) and maps (`<key>`) down to their items; objects with properties
/// found on the way get their own section (pushed to `children`) and keep their rules there.
fn inline<'a>(
    path: &str,
    schema: &'a JSONSchemaProps,
    rules: &mut Vec<(String, ValidationRule)>,
    children: &mut Vec<(String, &'a JSONSchemaProps)>,
) {
    if has_properties(schema) {
        children.push((path.to_owned(), schema));
        return;
    }
    rules.extend(rules_of(path, schema));
    for item in items(schema) {
        inline(&format!("{path}[]"), item, rules, children);
    }
    if let Some(value) = map_values(schema) {
        inline(&format!("{path}.<key>"), value, rules, children);
    }
}

fn rules_of(path: &str, schema: &JSONSchemaProps) -> Vec<(String, ValidationRule)> {
    schema
        .x_kubernetes_validations
        .iter()
        .flatten()
        .map(|rule| (path.to_owned(), rule.clone()))
        .collect()
}

fn row(path: &str, schema: &JSONSchemaProps, required: bool) -> Row {
    Row {
        path: path.to_owned(),
        type_name: type_name(schema),
        required,
        default: schema.default.as_ref().map(|d| json(&d.0)),
        constraints: constraints(schema),
        description: schema.description.clone(),
    }
}

fn has_properties(schema: &JSONSchemaProps) -> bool {
    schema.properties.as_ref().is_some_and(|p| !p.is_empty())
}

/// Item schemas of a list (one, or several for a tuple-style `items` array).
fn items(schema: &JSONSchemaProps) -> Vec<&JSONSchemaProps> {
    match &schema.items {
        Some(JSONSchemaPropsOrArray::Schema(item)) => vec![item.as_ref()],
        Some(JSONSchemaPropsOrArray::Schemas(items)) => items.iter().collect(),
        None => Vec::new(),
    }
}

/// The value schema of a map (`additionalProperties` with a schema).
fn map_values(schema: &JSONSchemaProps) -> Option<&JSONSchemaProps> {
    match &schema.additional_properties {
        Some(JSONSchemaPropsOrBool::Schema(value)) => Some(value.as_ref()),
        _ => None,
    }
}

/// A short type name: `integer`, `array of object`, `map of string`, `int-or-string`, …
fn type_name(schema: &JSONSchemaProps) -> String {
    if schema.x_kubernetes_int_or_string == Some(true) {
        return "int-or-string".to_owned();
    }
    let preserves = schema.x_kubernetes_preserve_unknown_fields == Some(true);
    match schema.type_.as_deref() {
        Some("array") => {
            let item_types: Vec<String> = items(schema).into_iter().map(type_name).collect();
            if item_types.is_empty() {
                "array".to_owned()
            } else {
                format!("array of {}", item_types.join(" / "))
            }
        }
        Some("object") => {
            if schema.x_kubernetes_embedded_resource == Some(true) {
                "object (embedded resource)".to_owned()
            } else if has_properties(schema) {
                "object".to_owned()
            } else if let Some(value) = map_values(schema) {
                format!("map of {}", type_name(value))
            } else if matches!(
                schema.additional_properties,
                Some(JSONSchemaPropsOrBool::Bool(true))
            ) || preserves
            {
                "object (any fields)".to_owned()
            } else {
                "object".to_owned()
            }
        }
        Some(other) => other.to_owned(),
        None => {
            let alternatives: Vec<String> = schema
                .any_of
                .iter()
                .chain(schema.one_of.iter())
                .flatten()
                .filter_map(|s| s.type_.clone())
                .collect();
            if alternatives.is_empty() {
                "any".to_owned()
            } else {
                alternatives.join(" or ")
            }
        }
    }
}

/// Enum, bounds, lengths, pattern, format and list/map semantics of a field; for a list or
/// map of plain values, also those of its items (`items:`) or values (`values:`).
fn constraints(schema: &JSONSchemaProps) -> Vec<String> {
    let mut out = own_constraints(schema);
    if schema.type_.as_deref() == Some("array") {
        for item in items(schema) {
            if !has_properties(item) {
                out.extend(
                    own_constraints(item)
                        .into_iter()
                        .map(|c| format!("items: {c}")),
                );
            }
        }
    }
    if let Some(value) = map_values(schema)
        && !has_properties(value)
    {
        out.extend(
            own_constraints(value)
                .into_iter()
                .map(|c| format!("values: {c}")),
        );
    }
    out
}

fn own_constraints(schema: &JSONSchemaProps) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(values) = &schema.enum_ {
        let values: Vec<String> = values.iter().map(|v| code(&enum_value(&v.0))).collect();
        out.push(format!("one of {}", values.join(", ")));
    }
    if let Some(format) = &schema.format {
        out.push(format!("format {}", code(format)));
    }
    if let Some(min) = schema.minimum {
        let op = if schema.exclusive_minimum == Some(true) {
            ">"
        } else {
            "≥"
        };
        out.push(format!("{op} {}", number(min)));
    }
    if let Some(max) = schema.maximum {
        let op = if schema.exclusive_maximum == Some(true) {
            "<"
        } else {
            "≤"
        };
        out.push(format!("{op} {}", number(max)));
    }
    if let Some(multiple) = schema.multiple_of {
        out.push(format!("multiple of {}", number(multiple)));
    }
    for (label, value) in [
        ("min length", schema.min_length),
        ("max length", schema.max_length),
        ("min items", schema.min_items),
        ("max items", schema.max_items),
        ("min entries", schema.min_properties),
        ("max entries", schema.max_properties),
    ] {
        if let Some(value) = value {
            out.push(format!("{label} {value}"));
        }
    }
    if schema.unique_items == Some(true) {
        out.push("unique items".to_owned());
    }
    if let Some(pattern) = &schema.pattern {
        out.push(format!("pattern {}", code(pattern)));
    }
    if let Some(list_type) = &schema.x_kubernetes_list_type {
        let mut s = format!("list type {}", code(list_type));
        if let Some(keys) = &schema.x_kubernetes_list_map_keys {
            s.push_str(&format!(" (keys {})", code_list(keys)));
        }
        out.push(s);
    }
    if let Some(map_type) = &schema.x_kubernetes_map_type {
        out.push(format!("map type {}", code(map_type)));
    }
    if schema.x_kubernetes_preserve_unknown_fields == Some(true) && has_properties(schema) {
        out.push("keeps unknown fields".to_owned());
    }
    out
}

fn render_section(out: &mut String, section: &Section, version_suffix: &str) {
    line(out, "");
    let title = if section.path.is_empty() {
        "Top level".to_owned()
    } else {
        code(&section.path)
    };
    let required = match section.required {
        Some(true) => " (required)",
        _ => "",
    };
    line(out, &format!("### {title}{required}{version_suffix}"));
    if let Some(description) = &section.description {
        line(out, "");
        line(out, &text(description, false));
    }
    if !section.rows.is_empty() {
        line(out, "");
        line(
            out,
            "| Field | Type | Required | Default | Constraints | Description |",
        );
        line(out, "|---|---|---|---|---|---|");
        for row in &section.rows {
            line(
                out,
                &format!(
                    "| {} | {} | {} | {} | {} | {} |",
                    cell_code(&row.path),
                    text(&row.type_name, true),
                    if row.required { "yes" } else { "" },
                    row.default.as_deref().map(cell_code).unwrap_or_default(),
                    row.constraints
                        .iter()
                        .map(|c| text(c, true))
                        .collect::<Vec<_>>()
                        .join(", "),
                    row.description
                        .as_deref()
                        .map(|d| text(d, true))
                        .unwrap_or_default(),
                ),
            );
        }
    }
    if !section.rules.is_empty() {
        line(out, "");
        line(out, "Validation rules:");
        line(out, "");
        for (path, rule) in &section.rules {
            line(out, &format!("- {}", rule_line(path, rule)));
        }
    }
}

/// `` `path`: message (`rule`) `` and, when set, the rule's reason and field path.
fn rule_line(path: &str, rule: &ValidationRule) -> String {
    let target = if path.is_empty() {
        "the object".to_owned()
    } else {
        code(path)
    };
    let mut s = match (&rule.message, &rule.message_expression) {
        (_, Some(expression)) => format!(
            "{target}: message computed by {} — rule {}",
            code(expression),
            code(&rule.rule)
        ),
        (Some(message), None) => format!(
            "{target}: {} — rule {}",
            text(message, false),
            code(&rule.rule)
        ),
        // The API server then answers with its generic "failed rule: <rule>".
        (None, None) => format!(
            "{target}: rule {} (no message: rejected as \"failed rule\")",
            code(&rule.rule)
        ),
    };
    if let Some(reason) = &rule.reason {
        s.push_str(&format!(", reason {}", code(reason)));
    }
    if let Some(field_path) = &rule.field_path {
        s.push_str(&format!(", reported at {}", code(field_path)));
    }
    s
}

fn line(out: &mut String, s: &str) {
    out.push_str(s);
    out.push('\n');
}

/// Compact JSON, as a default value is written in YAML/JSON manifests.
fn json(value: &serde_json::Value) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| value.to_string())
}

/// An enum value as a user types it: strings without quotes, anything else as JSON.
fn enum_value(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => json(other),
    }
}

/// A bound without a pointless `.0`: `1`, `0.5`.
fn number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}

fn code_list(values: &[String]) -> String {
    if values.is_empty() {
        "none".to_owned()
    } else {
        values
            .iter()
            .map(|v| code(v))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A Markdown code span that survives backticks in its content.
fn code(s: &str) -> String {
    let longest_run = s.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest_run + 1);
    if s.starts_with('`') || s.ends_with('`') {
        format!("{fence} {s} {fence}")
    } else {
        format!("{fence}{s}{fence}")
    }
}

/// A code span inside a table cell: `|` must be escaped even inside code there.
fn cell_code(s: &str) -> String {
    code(s).replace('|', "\\|")
}

/// Prose from a schema (a description or message) as one line of Markdown: whitespace
/// collapsed, `<` escaped outside code spans so it is not read as HTML, and inside a table
/// `|` escaped everywhere.
fn text(s: &str, in_table: bool) -> String {
    let collapsed = s.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = String::with_capacity(collapsed.len());
    let mut in_code: Option<usize> = None;
    let mut chars = collapsed.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '`' {
            let mut run = 1;
            while chars.peek() == Some(&'`') {
                chars.next();
                run += 1;
            }
            in_code = match in_code {
                None => Some(run),
                Some(open) if open == run => None,
                other => other,
            };
            out.push_str(&"`".repeat(run));
            continue;
        }
        match c {
            '|' if in_table => out.push_str("\\|"),
            '<' if in_code.is_none() => out.push_str("&lt;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A namespaced CRD `Widget` whose `spec` schema is the given JSON.
    fn crd_with_spec(spec: serde_json::Value) -> CustomResourceDefinition {
        serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.io"},
            "spec": {
                "group": "example.io",
                "names": {"kind": "Widget", "plural": "widgets", "shortNames": ["wd"]},
                "scope": "Namespaced",
                "versions": [{
                    "name": "v1",
                    "served": true,
                    "storage": true,
                    "schema": {"openAPIV3Schema": {
                        "type": "object",
                        "required": ["spec"],
                        "properties": {"spec": spec},
                    }},
                }],
            },
        }))
        .unwrap()
    }

    fn render_spec(spec: serde_json::Value) -> String {
        render(&[crd_with_spec(spec)])
    }

    /// The table row of a field, by its path.
    fn row_of<'a>(doc: &'a str, path: &str) -> &'a str {
        let start = format!("| `{path}` |");
        doc.lines()
            .find(|l| l.starts_with(&start))
            .unwrap_or_else(|| panic!("no row for {path} in:\n{doc}"))
    }

    #[test]
    fn nested_lists_of_objects_get_a_section_per_item_level() {
        let doc = render_spec(json!({
            "type": "object",
            "properties": {"matrix": {
                "type": "array",
                "description": "Rows of cells.",
                "items": {"type": "array", "items": {
                    "type": "object",
                    "description": "One cell.",
                    "required": ["x"],
                    "properties": {"x": {"type": "integer", "format": "int32", "minimum": 0.0}},
                    "x-kubernetes-validations": [{"rule": "self.x < 10", "message": "x too big"}],
                }},
                "x-kubernetes-validations": [{"rule": "size(self) > 0", "message": "no rows"}],
            }},
        }));
        assert_eq!(
            row_of(&doc, "spec.matrix"),
            "| `spec.matrix` | array of array of object |  |  |  | Rows of cells. |"
        );
        assert!(doc.contains("### `spec.matrix[][]`\n\nOne cell."), "{doc}");
        assert_eq!(
            row_of(&doc, "spec.matrix[][].x"),
            "| `spec.matrix[][].x` | integer | yes |  | format `int32`, ≥ 0 |  |"
        );
        // The list's own rule stays with `spec`, the items' rule goes to the item section.
        let spec_section =
            &doc[doc.find("### `spec`").unwrap()..doc.find("### `spec.matrix").unwrap()];
        assert!(spec_section.contains("- `spec.matrix`: no rows — rule `size(self) > 0`"));
        let item_section = &doc[doc.find("### `spec.matrix[][]`").unwrap()..];
        assert!(item_section.contains("- `spec.matrix[][]`: x too big — rule `self.x < 10`"));
    }

    #[test]
    fn maps_are_typed_by_their_values_and_maps_of_objects_get_a_section() {
        let doc = render_spec(json!({
            "type": "object",
            "properties": {
                "labels": {
                    "type": "object",
                    "additionalProperties": {"type": "string", "maxLength": 63},
                    "x-kubernetes-validations": [{"rule": "self.all(k, size(k) < 64)", "message": "keys too long"}],
                },
                "ports": {
                    "type": "object",
                    "additionalProperties": {
                        "type": "object",
                        "properties": {"port": {"type": "integer", "maximum": 65535.0}},
                    },
                },
                "anything": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            },
        }));
        assert_eq!(
            row_of(&doc, "spec.labels"),
            "| `spec.labels` | map of string |  |  | values: max length 63 |  |"
        );
        assert!(doc.contains("- `spec.labels`: keys too long"), "{doc}");
        assert_eq!(
            row_of(&doc, "spec.ports"),
            "| `spec.ports` | map of object |  |  |  |  |"
        );
        assert!(doc.contains("### `spec.ports.<key>`"), "{doc}");
        assert_eq!(
            row_of(&doc, "spec.ports.<key>.port"),
            "| `spec.ports.<key>.port` | integer |  |  | ≤ 65535 |  |"
        );
        assert_eq!(
            row_of(&doc, "spec.anything"),
            "| `spec.anything` | object (any fields) |  |  |  |  |"
        );
    }

    #[test]
    fn int_or_string_is_named_as_such_whatever_its_alternatives() {
        let doc = render_spec(json!({
            "type": "object",
            "properties": {"maxSurge": {
                "x-kubernetes-int-or-string": true,
                "anyOf": [{"type": "integer"}, {"type": "string"}],
                "default": "25%",
                "description": "Extra pods | during a rollout.",
            }},
        }));
        assert_eq!(
            row_of(&doc, "spec.maxSurge"),
            r#"| `spec.maxSurge` | int-or-string |  | `"25%"` |  | Extra pods \| during a rollout. |"#
        );
    }

    #[test]
    fn enums_list_their_values_and_defaults_are_json() {
        let doc = render_spec(json!({
            "type": "object",
            "required": ["mode"],
            "properties": {
                "mode": {"type": "string", "enum": ["Fast", "Safe"], "default": "Safe"},
                "level": {"type": "integer", "enum": [1, 2]},
                "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
            },
        }));
        assert_eq!(
            row_of(&doc, "spec.mode"),
            r#"| `spec.mode` | string | yes | `"Safe"` | one of `Fast`, `Safe` |  |"#
        );
        assert_eq!(
            row_of(&doc, "spec.level"),
            "| `spec.level` | integer |  |  | one of `1`, `2` |  |"
        );
        assert_eq!(
            row_of(&doc, "spec.tags"),
            "| `spec.tags` | array of string |  |  | items: one of `a`, `b` |  |"
        );
    }

    #[test]
    fn pipes_in_rules_are_escaped_in_tables_but_not_in_lists() {
        let doc = render_spec(json!({
            "type": "object",
            "properties": {"a": {"type": "string", "pattern": "^(x|y)$"}},
            "x-kubernetes-validations": [{"rule": "has(self.a) || true"}],
        }));
        assert_eq!(
            row_of(&doc, "spec.a"),
            r"| `spec.a` | string |  |  | pattern `^(x\|y)$` |  |"
        );
        assert!(
            doc.contains(
                "- `spec`: rule `has(self.a) || true` (no message: rejected as \"failed rule\")"
            ),
            "{doc}"
        );
    }

    #[test]
    fn prose_is_kept_on_one_line_and_angle_brackets_outside_code_are_escaped() {
        assert_eq!(text("a\n  b <c> `<d>`", false), "a b &lt;c> `<d>`");
        assert_eq!(code("a`b"), "``a`b``");
        assert_eq!(code("`a"), "`` `a ``");
    }

    #[test]
    fn the_reference_covers_every_kind_field_and_rule_message_of_accords_crds() {
        let doc = markdown();
        assert_eq!(doc, markdown(), "rendering is deterministic");
        for crd in crate::all_crds() {
            assert!(doc.contains(&format!("\n## {}\n", crd.spec.names.kind)));
            let root = root_schema(&crd.spec.versions[0]).unwrap();
            let mut all_rules = Vec::new();
            collect_rules(root, &mut all_rules);
            for rule in all_rules {
                let message = text(rule.message.as_deref().unwrap(), false);
                assert!(doc.contains(&message), "missing rule message {message:?}");
            }
            for section in sections(root) {
                for row in &section.rows {
                    row_of(&doc, &row.path);
                }
            }
        }
    }

    fn collect_rules(schema: &JSONSchemaProps, out: &mut Vec<ValidationRule>) {
        out.extend(schema.x_kubernetes_validations.iter().flatten().cloned());
        for prop in schema.properties.iter().flat_map(|p| p.values()) {
            collect_rules(prop, out);
        }
        for item in items(schema) {
            collect_rules(item, out);
        }
        if let Some(value) = map_values(schema) {
            collect_rules(value, out);
        }
    }
}
