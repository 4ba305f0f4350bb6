//! The ProviderSwitch controller: validates the spec and the credentials Secret
//! (`Ready`), and holds the ProviderSwitch while a Switch or SmartNicPort still uses
//! it (their ports are cleaned through it first). Kubernetes I/O.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};

use super::context::{Context, device_key};
use super::{ControllerError, write_status};
use crate::api::keys::FINALIZER;
use crate::api::{ProviderSwitch, SmartNicPort, Switch};
use crate::backends::check_credentials;
use crate::decide::failure::Failure;
use crate::decide::lease::connect_timeout_note;
use crate::decide::status::provider_status;
use crate::decide::validate::validate_provider;

/// Reconciles one ProviderSwitch.
pub(super) async fn reconcile(
    provider: Arc<ProviderSwitch>,
    ctx: Arc<Context>,
) -> Result<Action, ControllerError> {
    let ns = provider.namespace().unwrap_or_default();
    let api: Api<ProviderSwitch> = Api::namespaced(ctx.client.clone(), &ns);
    finalizer(&api, FINALIZER, provider, |event| async {
        match event {
            FinalizerEvent::Apply(p) => apply_provider(&p, &ctx).await,
            FinalizerEvent::Cleanup(p) => {
                let users = switches_using(&p, &ctx).await?;
                if users > 0 {
                    return Err(ControllerError::SwitchesRemaining(users));
                }
                ctx.remove_worker(&device_key(&p));
                Ok(Action::await_change())
            }
        }
    })
    .await
    .map_err(|e| ControllerError::Finalizer(Box::new(e)))
}

/// Switches and SmartNicPorts that use `provider`: it stays until they are gone
/// (their ports must be cleaned through it first).
async fn switches_using(
    provider: &ProviderSwitch,
    ctx: &Context,
) -> Result<usize, ControllerError> {
    let ns = provider.namespace().unwrap_or_default();
    let switches = Api::<Switch>::namespaced(ctx.client.clone(), &ns)
        .list(&ListParams::default())
        .await?;
    let snics = Api::<SmartNicPort>::namespaced(ctx.client.clone(), &ns)
        .list(&ListParams::default())
        .await?;
    Ok(switches
        .items
        .iter()
        .filter(|s| s.spec.provider.name == provider.name_any())
        .count()
        + snics
            .items
            .iter()
            .filter(|p| p.spec.provider.name == provider.name_any())
            .count())
}

async fn apply_provider(
    provider: &ProviderSwitch,
    ctx: &Context,
) -> Result<Action, ControllerError> {
    let ns = provider.namespace().unwrap_or_default();
    let old = provider.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let secret = ctx.secrets.of_provider(&ctx.client, provider).await?;
    let verdict = validate_provider(&provider.spec)
        .map_err(|errors| Failure::InvalidProvider {
            name: provider.name_any(),
            errors,
        })
        .and_then(|()| Ok(check_credentials(provider, secret.as_deref())?));
    let note = connect_timeout_note(
        provider
            .spec
            .options
            .as_ref()
            .and_then(|o| o.connect_timeout_seconds),
        ctx.settings.batch_timeout,
    );
    provider_status(
        &mut status,
        &verdict,
        note.as_deref(),
        provider.metadata.generation,
        jiff::Timestamp::now(),
    );
    write_status(
        &Api::<ProviderSwitch>::namespaced(ctx.client.clone(), &ns),
        &provider.name_any(),
        &old,
        &status,
    )
    .await?;
    Ok(Action::requeue(Duration::from_secs(300)))
}
