//! What the doctor reports: findings grouped by the invariant they break
//! (DESIGN §3), the objects involved, why it matters and what `--fix` does.

use serde::Serialize;

/// A kind of finding, in the order the report lists them: worst first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Check {
    /// Two or more live claims point at one pod.
    SharedPod,
    /// A claim holds several pods by UID.
    SeveralPods,
    /// A claim points at a pod it has lost (gone, failed, another's).
    LostPod,
    /// A claim shown Bound whose pod's CN store HAKeeper does not list.
    StoreMissing,
    /// A store carries the labels of a claim that does not own its pod.
    ForeignStoreLabels,
    /// A pod owned by no claim that exists.
    OrphanPod,
    /// A pool with more pods than its `maxPods`.
    OverMaxPods,
    /// An object deleted long ago that a finalizer still holds.
    StuckFinalizer,
    /// A spec the validation refuses.
    InvalidSpec,
    /// Information: a Go binding that cutover adopts.
    LegacyBinding,
}

impl Check {
    /// The invariant of DESIGN §3 the finding breaks; `-` for information.
    pub fn invariant(self) -> &'static str {
        match self {
            Self::SharedPod | Self::SeveralPods => "I1",
            Self::LostPod | Self::StoreMissing => "I2",
            Self::OrphanPod => "I3",
            Self::OverMaxPods => "I6",
            Self::ForeignStoreLabels => "I7",
            Self::InvalidSpec => "I8",
            Self::StuckFinalizer => "finalizer",
            Self::LegacyBinding => "-",
        }
    }

    pub fn severity(self) -> Severity {
        match self {
            Self::LegacyBinding => Severity::Information,
            _ => Severity::Finding,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::SharedPod => "shared-pod",
            Self::SeveralPods => "several-pods",
            Self::LostPod => "lost-pod",
            Self::StoreMissing => "store-missing",
            Self::ForeignStoreLabels => "foreign-store-labels",
            Self::OrphanPod => "orphan-pod",
            Self::OverMaxPods => "over-max-pods",
            Self::StuckFinalizer => "stuck-finalizer",
            Self::InvalidSpec => "invalid-spec",
            Self::LegacyBinding => "legacy-binding",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    /// Something is wrong: the doctor exits 1.
    Finding,
    /// Worth knowing, nothing wrong.
    Information,
}

/// One object a finding is about.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ObjectRef {
    /// `Pod`, `CNClaim`, `CNClaimSet`, `CNPool`, or `CNStore` (a store in
    /// HAKeeper: its name is the store's UUID).
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
}

impl ObjectRef {
    pub fn new(kind: &'static str, namespace: &str, name: &str) -> Self {
        Self { kind, namespace: namespace.to_owned(), name: name.to_owned() }
    }
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// Who repairs a finding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FixBy {
    /// `cnpool doctor --fix`, with the operator's own writes.
    Doctor,
    /// The running operator, by itself.
    Operator,
    /// A person: the message says what to change.
    Person,
    /// Nothing to repair (information).
    Nothing,
}

/// A write `--fix` makes: each is one of the operator's own.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "write", rename_all = "kebab-case")]
pub enum Write {
    /// The claim write that shows a misbound claim Lost (`Misbound`), then
    /// the one that clears its `spec.podName` so that it binds again.
    MarkMisbound { namespace: String, claim: String },
    /// The guarded release of a pod from the owner it carries.
    ReleasePod { namespace: String, pod: String, owner: Owner },
}

/// The owner a pod carries, as its release is guarded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Owner {
    /// `claim-uid`.
    ClaimUid(String),
    /// The Go operator's `claimed-by`, without a `claim-uid`.
    GoClaimName(String),
}

impl std::fmt::Display for Write {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::MarkMisbound { namespace, claim } => {
                write!(f, "CNClaim {namespace}/{claim}: status Lost (Misbound), then spec.podName cleared")
            }
            Self::ReleasePod { namespace, pod, owner: Owner::ClaimUid(uid) } => {
                write!(f, "Pod {namespace}/{pod}: guarded release from claim-uid {uid}")
            }
            Self::ReleasePod { namespace, pod, owner: Owner::GoClaimName(name) } => {
                write!(f, "Pod {namespace}/{pod}: guarded release from the Go operator's claimed-by {name}")
            }
        }
    }
}

/// What repairs a finding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Fix {
    pub by: FixBy,
    /// What happens, in a sentence.
    pub action: String,
    /// The writes `--fix` makes (for [`FixBy::Doctor`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub writes: Vec<Write>,
}

impl Fix {
    pub fn by(by: FixBy, action: impl Into<String>) -> Self {
        Self { by, action: action.into(), writes: Vec::new() }
    }
}

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub check: Check,
    pub invariant: &'static str,
    pub severity: Severity,
    /// One line: what is wrong.
    pub summary: String,
    /// The objects involved, the first one the finding is about.
    pub objects: Vec<ObjectRef>,
    /// Why it matters.
    pub why: String,
    pub fix: Fix,
}

impl Finding {
    pub fn new(check: Check, summary: String, objects: Vec<ObjectRef>, why: &str, fix: Fix) -> Self {
        Self {
            check,
            invariant: check.invariant(),
            severity: check.severity(),
            summary,
            objects,
            why: why.to_owned(),
            fix,
        }
    }

    /// What identifies the finding across two reads of the cluster.
    pub fn key(&self) -> (Check, Vec<ObjectRef>) {
        let mut objects = self.objects.clone();
        objects.sort();
        (self.check, objects)
    }
}
