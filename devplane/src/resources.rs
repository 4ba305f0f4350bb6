//! The kinds the server serves: the built-in ones (Namespace, Secret, ConfigMap,
//! Event in core/v1 and events.k8s.io/v1, Lease, ControllerRevision,
//! CustomResourceDefinition, and — stored and served only — ServiceAccount, Node,
//! Deployment and the RBAC kinds) and those installed through CRDs. Pure data, no I/O.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// The strings of the JSON array at `pointer` (empty when absent).
pub(crate) fn string_list(value: &Value, pointer: &str) -> Vec<String> {
    value
        .pointer(pointer)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Identifies a resource independently of version: (group, plural).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResKey {
    /// API group ("" for core).
    pub group: String,
    /// Plural resource name.
    pub plural: String,
}

/// A served resource.
#[derive(Debug, Clone)]
pub struct Resource {
    /// API group ("" for core).
    pub group: String,
    /// Served versions; the first is the preferred one.
    pub versions: Vec<String>,
    /// Plural name (`switchports`).
    pub plural: String,
    /// Singular name (`switchport`).
    pub singular: String,
    /// Kind (`SwitchPort`).
    pub kind: String,
    /// List kind (`SwitchPortList`).
    pub list_kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Whether a `/status` subresource exists.
    pub status_subresource: bool,
    /// Short names.
    pub short_names: Vec<String>,
    /// Categories.
    pub categories: Vec<String>,
    /// `openAPIV3Schema` per version (custom resources only).
    pub schemas: BTreeMap<String, Value>,
    /// `additionalPrinterColumns` per version (custom resources only).
    pub printer_columns: BTreeMap<String, Vec<Value>>,
    /// `selectableFields[].jsonPath` per version (custom resources only).
    pub selectable_fields: BTreeMap<String, Vec<String>>,
    /// Whether this is a built-in kind.
    pub builtin: bool,
}

impl Resource {
    /// The version-independent key.
    pub fn key(&self) -> ResKey {
        ResKey {
            group: self.group.clone(),
            plural: self.plural.clone(),
        }
    }

    /// The key its objects are stored under: its own, except for events.k8s.io
    /// Events, which are core Events served in a second shape
    /// ([`crate::events`]).
    pub fn storage_key(&self) -> ResKey {
        if crate::events::is_events_alias(&self.group, &self.plural) {
            ResKey {
                group: String::new(),
                plural: "events".into(),
            }
        } else {
            self.key()
        }
    }

    /// Whether this is the events.k8s.io face of core Events.
    pub fn is_events_alias(&self) -> bool {
        crate::events::is_events_alias(&self.group, &self.plural)
    }

    /// `v1` or `group/version`.
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_owned()
        } else {
            format!("{}/{version}", self.group)
        }
    }

    /// Whether `version` is served.
    pub fn serves(&self, version: &str) -> bool {
        self.versions.iter().any(|v| v == version)
    }

    fn builtin(
        group: &str,
        version: &str,
        plural: &str,
        kind: &str,
        namespaced: bool,
        status: bool,
        short: &[&str],
    ) -> Self {
        Self {
            group: group.into(),
            versions: vec![version.into()],
            plural: plural.into(),
            singular: kind.to_lowercase(),
            kind: kind.into(),
            list_kind: format!("{kind}List"),
            namespaced,
            status_subresource: status,
            short_names: short.iter().map(|s| s.to_string()).collect(),
            categories: Vec::new(),
            schemas: BTreeMap::new(),
            printer_columns: BTreeMap::new(),
            selectable_fields: BTreeMap::new(),
            builtin: true,
        }
    }

    /// The built-in kinds.
    pub fn builtins() -> Vec<Resource> {
        vec![
            Self::builtin("", "v1", "namespaces", "Namespace", false, true, &["ns"]),
            Self::builtin("", "v1", "secrets", "Secret", true, false, &[]),
            // Stored for the BGP opt-in (patchbay annotates Nodes); no kubelet.
            Self::builtin("", "v1", "nodes", "Node", false, true, &["no"]),
            Self::builtin("", "v1", "configmaps", "ConfigMap", true, false, &["cm"]),
            Self::builtin("", "v1", "events", "Event", true, false, &["ev"]),
            Self::builtin(
                "events.k8s.io",
                "v1",
                "events",
                "Event",
                true,
                false,
                &["ev"],
            ),
            Self::builtin(
                "coordination.k8s.io",
                "v1",
                "leases",
                "Lease",
                true,
                false,
                &[],
            ),
            // Stored and served for `kubectl apply -k deploy/`; nothing enforces
            // RBAC and nothing runs a Deployment.
            Self::builtin(
                "",
                "v1",
                "serviceaccounts",
                "ServiceAccount",
                true,
                false,
                &["sa"],
            ),
            // A configuration's revisions (patchbay's rollouts keep them here).
            Self::builtin(
                "apps",
                "v1",
                "controllerrevisions",
                "ControllerRevision",
                true,
                false,
                &[],
            ),
            Self::builtin(
                "apps",
                "v1",
                "deployments",
                "Deployment",
                true,
                true,
                &["deploy"],
            ),
            Self::builtin(
                "rbac.authorization.k8s.io",
                "v1",
                "clusterroles",
                "ClusterRole",
                false,
                false,
                &[],
            ),
            Self::builtin(
                "rbac.authorization.k8s.io",
                "v1",
                "clusterrolebindings",
                "ClusterRoleBinding",
                false,
                false,
                &[],
            ),
            Self::builtin(
                "rbac.authorization.k8s.io",
                "v1",
                "roles",
                "Role",
                true,
                false,
                &[],
            ),
            Self::builtin(
                "rbac.authorization.k8s.io",
                "v1",
                "rolebindings",
                "RoleBinding",
                true,
                false,
                &[],
            ),
            // Stored and served for `kubectl apply -k deploy/`; nothing enforces
            // Priority and Fairness.
            Self::builtin(
                "flowcontrol.apiserver.k8s.io",
                "v1",
                "flowschemas",
                "FlowSchema",
                false,
                true,
                &[],
            ),
            Self::builtin(
                "flowcontrol.apiserver.k8s.io",
                "v1",
                "prioritylevelconfigurations",
                "PriorityLevelConfiguration",
                false,
                true,
                &[],
            ),
            // Called on writes (crate::admission), as kube-apiserver does.
            Self::builtin(
                "admissionregistration.k8s.io",
                "v1",
                "validatingwebhookconfigurations",
                "ValidatingWebhookConfiguration",
                false,
                false,
                &[],
            ),
            Self::builtin(
                "apiextensions.k8s.io",
                "v1",
                "customresourcedefinitions",
                "CustomResourceDefinition",
                false,
                true,
                &["crd", "crds"],
            ),
        ]
    }

    /// The resource a CRD object declares, or why it cannot be served.
    pub fn from_crd(crd: &Value) -> Result<Resource, String> {
        let spec = crd.get("spec").ok_or("spec: Required value")?;
        let s = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_owned);
        let group = s(spec, "/group").ok_or("spec.group: Required value")?;
        let plural = s(spec, "/names/plural").ok_or("spec.names.plural: Required value")?;
        let kind = s(spec, "/names/kind").ok_or("spec.names.kind: Required value")?;
        let scope = s(spec, "/scope").ok_or("spec.scope: Required value")?;
        let name = s(crd, "/metadata/name").unwrap_or_default();
        if name != format!("{plural}.{group}") {
            return Err(format!(
                "metadata.name: Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group"
            ));
        }
        if !matches!(scope.as_str(), "Namespaced" | "Cluster") {
            return Err(format!(
                "spec.scope: Unsupported value: {scope:?}: supported values: \"Cluster\", \"Namespaced\""
            ));
        }
        let list = |p: &str| string_list(spec, p);
        let versions_json = spec
            .get("versions")
            .and_then(Value::as_array)
            .filter(|v| !v.is_empty())
            .ok_or("spec.versions: Required value")?;
        let mut versions = Vec::new();
        let mut schemas = BTreeMap::new();
        let mut columns = BTreeMap::new();
        let mut selectable = BTreeMap::new();
        let mut status = false;
        for v in versions_json {
            let vname = s(v, "/name").ok_or("spec.versions[].name: Required value")?;
            if v.get("served").and_then(Value::as_bool) == Some(false) {
                continue;
            }
            if v.get("storage").and_then(Value::as_bool) == Some(true) {
                versions.insert(0, vname.clone());
            } else {
                versions.push(vname.clone());
            }
            if let Some(schema) = v.pointer("/schema/openAPIV3Schema") {
                schemas.insert(vname.clone(), schema.clone());
            }
            if let Some(cols) = v.get("additionalPrinterColumns").and_then(Value::as_array) {
                columns.insert(vname.clone(), cols.clone());
            }
            let fields: Vec<String> = v
                .get("selectableFields")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|f| f.get("jsonPath").and_then(Value::as_str))
                .map(str::to_owned)
                .collect();
            if !fields.is_empty() {
                selectable.insert(vname.clone(), fields);
            }
            status |= v.pointer("/subresources/status").is_some();
        }
        let singular = s(spec, "/names/singular").unwrap_or_else(|| kind.to_lowercase());
        Ok(Resource {
            group,
            versions,
            list_kind: s(spec, "/names/listKind").unwrap_or_else(|| format!("{kind}List")),
            singular,
            plural,
            kind,
            namespaced: scope == "Namespaced",
            status_subresource: status,
            short_names: list("/names/shortNames"),
            categories: list("/names/categories"),
            schemas,
            printer_columns: columns,
            selectable_fields: selectable,
            builtin: false,
        })
    }

    /// The `status.acceptedNames` a CRD reports.
    pub fn accepted_names(&self) -> Value {
        json!({
            "plural": self.plural,
            "singular": self.singular,
            "kind": self.kind,
            "listKind": self.list_kind,
            "shortNames": self.short_names,
            "categories": self.categories,
        })
    }
}
