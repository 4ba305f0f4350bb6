//! What the ports see, through the dialect's `neighbors:` section: one session of its
//! own (not a batch's, not a drift sweep's), the LLDP command then the MAC table
//! command. Device I/O through a session.

use super::*;

#[async_trait]
impl crate::device::NeighborSource for CliSwitch {
    async fn neighbors(&self) -> Result<crate::neighbors::Neighbors, DeviceError> {
        let Some(spec) = &self.dialect.neighbors else {
            return Err(DeviceError::Protocol {
                during: "reading neighbours".into(),
                cause: Cause::msg(format!(
                    "dialect {} has no neighbors section",
                    self.dialect.name
                )),
            });
        };
        let mut s = self.session().await?;
        let lldp = s.run(&spec.lldp_command, false).await;
        let macs = match (&lldp, &spec.macs_command) {
            (Ok(_), Some(c)) => Some(s.run(c, false).await),
            _ => None,
        };
        s.close().await;
        let lldp = spec.lldp(&lldp?);
        let macs = macs.transpose()?.map(|t| spec.macs(&t)).unwrap_or_default();
        Ok(crate::neighbors::Neighbors::gather(None, lldp, macs))
    }
}
