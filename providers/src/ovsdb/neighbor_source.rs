//! What the bridge's ports see: the MAC addresses ovs-vswitchd learnt on each (its FDB,
//! with ages), read with `fdb/show` on ovs-vswitchd's control socket (unixctl). No LLDP
//! on Open vSwitch here.

use super::*;

#[async_trait]
impl NeighborSource for OvsSwitch {
    /// The bridge's learned MAC addresses per port: the interface names and
    /// OpenFlow port numbers of the bridge's ports from OVSDB (one transaction), then
    /// `fdb/show` on the control socket. Open vSwitch sends no LLDP of its own: an
    /// lldpd beside it is read through an `os: linux` source.
    async fn neighbors(&self) -> Result<crate::neighbors::Neighbors, DeviceError> {
        let Some(socket) = &self.opts.control_socket else {
            return Err(DeviceError::Protocol {
                during: "reading learned MAC addresses".into(),
                cause: Cause::msg("no control socket is configured (options.controlSocket)"),
            });
        };
        let names = self
            .with_session(async |conn| self.ofport_names(conn).await)
            .await?;
        let mut ctl = Connection::connect(
            &Endpoint::Unix(socket.clone()),
            self.opts.connect_timeout,
            self.opts.command_timeout,
        )
        .await?;
        let answer = ctl.call("fdb/show", json!([self.opts.bridge])).await?;
        let text = answer.as_str().unwrap_or_default();
        let learned = fdb::parse(text).map_err(|e| DeviceError::Protocol {
            during: "reading fdb/show".into(),
            cause: Cause::msg(e),
        })?;
        Ok(crate::neighbors::Neighbors::gather_aged(
            None,
            [],
            fdb::by_name(&learned, &names),
        ))
    }
}
