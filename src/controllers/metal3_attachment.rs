//! Metal3 HostNetworkAttachments (with `--metal3-switches`): each becomes the
//! SwitchPortConfiguration of its name and namespace that patchbay derives from it
//! ([`crate::decide::metal3_host::attachment_configuration`]) — written with
//! server-side apply, owned by the attachment, labelled [`ATTACHMENT_LABEL`] — which
//! the ports of the hosts naming it carry once they are provisioned. An attachment
//! that breaks BMO's rules (or patchbay's limits), or whose name a
//! SwitchPortConfiguration patchbay did not derive already has, derives nothing: a
//! Warning Event on it says why, and a configuration derived before stays as it
//! was. An attachment edited while in use is applied like any configuration edit.
//! Kubernetes I/O.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;

use super::ControllerError;
use super::context::Context;
use crate::api::SwitchPortConfiguration;
use crate::api::metal3_attachment::HostNetworkAttachment;
use crate::decide::metal3_host::{ATTACHMENT_LABEL, attachment_configuration};
use crate::decide::status::Severity;

/// The field manager of the derived SwitchPortConfigurations.
const MANAGER: &str = "patchbay-metal3-attachments";

/// Reconciles one HostNetworkAttachment.
pub(super) async fn reconcile(
    hna: Arc<HostNetworkAttachment>,
    ctx: Arc<Context>,
) -> Result<Action, ControllerError> {
    let ns = hna.namespace().unwrap_or_default();
    let name = hna.name_any();
    let taken = ctx.stores.configurations.state().into_iter().find(|c| {
        c.namespace().as_deref() == Some(ns.as_str())
            && c.name_any() == name
            && c.labels().get(ATTACHMENT_LABEL) != Some(&name)
    });
    let refusal = match (attachment_configuration(&hna.spec), taken) {
        (_, Some(_)) => Some((
            "Conflict",
            format!(
                "SwitchPortConfiguration {ns}/{name} exists and was not derived from this \
                 HostNetworkAttachment: rename one of them"
            ),
        )),
        (Err(errors), None) => Some((
            "InvalidAttachment",
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        )),
        (Ok(spec), None) => {
            super::metal3_switch::apply_derived::<SwitchPortConfiguration, _>(
                &ctx.client,
                hna.as_ref(),
                (MANAGER, ATTACHMENT_LABEL),
                serde_json::to_value(&spec).unwrap_or_default(),
            )
            .await?;
            None
        }
    };
    if let Some((reason, note)) = refusal {
        ctx.events
            .publish(hna.as_ref(), Severity::Warning, reason, &note)
            .await;
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}
