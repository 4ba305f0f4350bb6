//! Linux-based switches (Cumulus, SONiC and most open NOSes run lldpd) as a
//! neighbour source: one SSH login per read, `lldpcli` run on exec channels of it (the
//! chassis, then the neighbours), the answers parsed by [`crate::neighbors::lldpd`].
//! Read only: nothing here configures a port. Device I/O.
//!
//! The commands carry no secret and take no input but lldpd's control socket path,
//! which is checked by [`LldpSocket::parse`] before it can reach a command line.

use std::time::Duration;

use async_trait::async_trait;

use crate::cli::transport::{ExecOutput, SshTarget, exec};
use crate::device::NeighborSource;
use crate::error::{Cause, DeviceError};
use crate::neighbors::{Neighbors, lldpd};

pub use crate::values::LldpSocket;

/// A Linux device running lldpd, read over SSH.
#[derive(Debug, Clone)]
pub struct LinuxLldp {
    target: SshTarget,
    socket: Option<LldpSocket>,
    command_timeout: Duration,
}

impl LinuxLldp {
    /// A source reading `target`'s lldpd (through `socket` when given), each command
    /// within `command_timeout`.
    pub fn new(target: SshTarget, socket: Option<LldpSocket>, command_timeout: Duration) -> Self {
        Self {
            target,
            socket,
            command_timeout,
        }
    }
}

/// The output of a command that succeeded, or what it said when it failed.
fn succeeded(command: &str, out: ExecOutput) -> Result<String, DeviceError> {
    if out.status == Some(0) {
        return Ok(out.stdout);
    }
    let said = if out.stderr.trim().is_empty() {
        out.stdout.trim()
    } else {
        out.stderr.trim()
    };
    let status = out.status.map_or_else(
        || "no exit status".to_owned(),
        |s| format!("exit status {s}"),
    );
    Err(DeviceError::CommandRejected {
        command: command.to_owned(),
        output: format!("{status}: {}", said.chars().take(300).collect::<String>()),
    })
}

fn protocol(during: &str, why: String) -> DeviceError {
    DeviceError::Protocol {
        during: during.to_owned(),
        cause: Cause::msg(why),
    }
}

#[async_trait]
impl NeighborSource for LinuxLldp {
    async fn neighbors(&self) -> Result<Neighbors, DeviceError> {
        let socket = self.socket.as_ref().map(LldpSocket::as_str);
        let commands = [
            lldpd::chassis_command(socket),
            lldpd::neighbors_command(socket),
        ];
        let mut outputs = exec(&self.target, &commands, self.command_timeout)
            .await?
            .into_iter();
        let mut next = |command: &str| {
            outputs
                .next()
                .ok_or_else(|| protocol("reading lldpd", format!("no answer to `{command}`")))
                .and_then(|out| succeeded(command, out))
        };
        let chassis = next(&commands[0])?;
        let neighbors = next(&commands[1])?;
        let chassis_id =
            lldpd::chassis_id(&chassis).map_err(|e| protocol("reading lldpd's chassis", e))?;
        let lldp =
            lldpd::neighbors(&neighbors).map_err(|e| protocol("reading lldpd's neighbours", e))?;
        Ok(Neighbors::gather(chassis_id, lldp, []))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_path_is_one_plain_absolute_path() {
        assert!(LldpSocket::parse("/run/lldpd.socket").is_ok());
        assert!(LldpSocket::parse("/tmp/x-1/sw_2.sock").is_ok());
        for (bad, why) in [
            ("run/lldpd.socket", "absolute"),
            ("/run/lldpd.socket; reboot", "';'"),
            ("/run/$(id)", "'$'"),
            ("/run/a b", "' '"),
            ("/run/../etc/x", "`..`"),
        ] {
            let e = LldpSocket::parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn a_failed_command_says_its_status_and_what_it_printed() {
        let e = succeeded(
            "lldpcli show chassis",
            ExecOutput {
                stdout: String::new(),
                stderr: "lldpcli: unable to connect to lldpd daemon\n".into(),
                status: Some(1),
            },
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "the device rejected `lldpcli show chassis`: exit status 1: lldpcli: unable to connect to lldpd daemon"
        );
    }
}
