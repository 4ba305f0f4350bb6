//! The BGP speaker side of an SSH CLI device (a dialect's `bgp:` section, FRR's vtysh):
//! read the speaker's neighbours, route maps and sessions; apply a plan of neighbour
//! and policy changes and read back. Device I/O through a session.

use super::*;

impl CliSwitch {
    pub(super) fn bgp_spec(&self) -> Result<&crate::cli::dialect::bgp::BgpSpec, DeviceError> {
        self.dialect
            .bgp
            .as_ref()
            .ok_or_else(|| DeviceError::Protocol {
                during: "configuring BGP".into(),
                cause: Cause::msg(format!("dialect {} has no bgp section", self.dialect.name)),
            })
    }

    /// Reads the speaker in session `s`.
    pub(super) async fn bgp_read(
        &self,
        s: &mut Session<'_>,
    ) -> Result<crate::bgp::SpeakerState, DeviceError> {
        let spec = self.bgp_spec()?;
        let neighbors = s.run(&spec.read.neighbors, false).await?;
        let lists = s.run(&spec.read.prefix_lists, false).await?;
        let sessions = match spec.state_command(&neighbors) {
            Some(command) => Some(s.run(command, false).await?),
            None => None,
        };
        let route_maps = match &spec.read.route_maps {
            Some(command) => Some(s.run(command, false).await?),
            None => None,
        };
        spec.parse(
            &neighbors,
            &lists,
            sessions.as_deref(),
            route_maps.as_deref(),
        )
        .map_err(|why| DeviceError::Protocol {
            during: "reading the BGP neighbours".into(),
            cause: Cause::msg(why),
        })
    }

    pub(super) async fn bgp_apply_in(
        &self,
        s: &mut Session<'_>,
        router: &crate::bgp::Router,
        changes: &[crate::bgp::Change],
    ) -> Result<crate::bgp::SpeakerState, DeviceError> {
        let spec = self.bgp_spec()?;
        let lines = spec.render(router, changes);
        if !lines.is_empty() {
            s.hide = changes
                .iter()
                .filter_map(|c| match c {
                    crate::bgp::Change::Put { neighbor, .. } => neighbor.password.as_ref(),
                    crate::bgp::Change::Remove { .. } | crate::bgp::Change::Policy { .. } => None,
                })
                .map(|p| p.expose().to_owned())
                .collect();
            let configure = self.dialect.session.configure.clone();
            s.run(&configure, true).await?;
            let text: Vec<String> = lines.into_iter().map(|l| l.text).collect();
            let answers = s.run_many(&text, true).await?;
            // Back to privileged mode whatever level a failed line left.
            let exit = self.dialect.session.exit.clone();
            for _ in 0..4 {
                if s.ctx.is_none() {
                    break;
                }
                s.run(&exit, true).await?;
            }
            if let Some(e) = answers.into_iter().find_map(Result::err) {
                return Err(e);
            }
        }
        self.bgp_read(s).await
    }
}

#[async_trait]
impl crate::device::BgpSpeaker for CliSwitch {
    async fn bgp_state(&self) -> Result<crate::bgp::SpeakerState, DeviceError> {
        self.bgp_spec()?;
        let mut s = self.session().await?;
        let r = self.bgp_read(&mut s).await;
        s.close().await;
        r
    }

    async fn bgp_apply(
        &self,
        router: &crate::bgp::Router,
        changes: &[crate::bgp::Change],
    ) -> Result<crate::bgp::SpeakerState, DeviceError> {
        self.bgp_spec()?;
        let mut s = self.session().await?;
        let r = self.bgp_apply_in(&mut s, router, changes).await;
        s.close().await;
        r
    }
}
