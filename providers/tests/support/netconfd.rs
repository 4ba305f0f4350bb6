//! How a test or benchmark logs in to the test bed's netconfd: as its client key,
//! with the server's host key pinned. Shared by the backend tests
//! (tests/netconf_backend.rs), the operator's NETCONF test and the NETCONF benchmark.

use std::time::Duration;

use patchbay_providers::cli::{Auth, HostKeyPolicy, SshTarget};
use patchbay_providers::secret::SecretString;
use patchbay_testbed::Netconfd;

/// The login of `nc`'s client, host key pinned.
pub fn login(nc: &Netconfd) -> SshTarget {
    SshTarget {
        address: nc.address.clone(),
        port: nc.port,
        username: nc.username.clone(),
        auth: Auth::PrivateKey {
            pem: SecretString::new(nc.client_key.clone()),
            passphrase: None,
        },
        host_key: HostKeyPolicy::Fingerprint(nc.host_key_fingerprint.clone()),
        connect_timeout: Duration::from_secs(10),
    }
}
