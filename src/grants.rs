//! The VLANPool grants, computed once per pool change and shared by the controllers
//! and the webhook. State (a lock around the last result); what the grants are is
//! [`crate::decide::tenancy::Grants`]'s decision.

use std::sync::Arc;

use patchbay_providers::values::VlanId;

use crate::api::VLANPool;
use crate::decide::tenancy::Grants;

/// The grants last computed, and the pools' key (names and resourceVersions) they
/// were computed from: a reader pays for [`Grants::new`] once per pool change, not
/// once per port or review.
#[derive(Debug, Default)]
pub struct GrantsCache(parking_lot::Mutex<Option<(String, Arc<Grants>)>>);

impl GrantsCache {
    /// The grants of `pools` (a cache's contents) with `parking` granted to nobody.
    pub fn get(&self, pools: &[Arc<VLANPool>], parking: Option<VlanId>) -> Arc<Grants> {
        let mut key: Vec<String> = pools
            .iter()
            .map(|p| {
                format!(
                    "{}@{}",
                    p.metadata.name.as_deref().unwrap_or_default(),
                    p.metadata.resource_version.as_deref().unwrap_or_default()
                )
            })
            .collect();
        key.sort();
        key.push(parking.map(|v| v.to_string()).unwrap_or_default());
        let key = key.join(",");
        let mut cached = self.0.lock();
        if let Some((k, g)) = cached.as_ref()
            && *k == key
        {
            return g.clone();
        }
        let g = Arc::new(Grants::new(pools.iter().map(AsRef::as_ref), parking));
        *cached = Some((key, g.clone()));
        g
    }
}
