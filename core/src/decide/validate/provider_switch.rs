//! Validation of providerSwitches: backend and OS, address, host-key pins, credentials, options. Pure.

use super::*;

/// Which operating systems each backend can drive. Over `ssh` these are the OSes
/// with a dialect in `providers/dialects/`, over `netconf` those with a device model
/// in `providers/models/` (NX-OS, OS10, IOS-XE and EOS have none yet: no simulator
/// here to prove one against), over `ansible` those with built-in playbooks in
/// `playbooks/` (ios, junos).
pub fn backend_supports(backend: Backend, os: DeviceOs) -> bool {
    use DeviceOs::*;
    match backend {
        Backend::Ssh => matches!(
            os,
            Ios | Eos | Powerconnect | Dell10g | Fastiron | Linux | Frr
        ),
        Backend::Netconf => matches!(os, Junos | Yang),
        Backend::Ansible => matches!(os, Ios | Junos),
        Backend::Ovsdb => matches!(os, Ovs),
        Backend::Fixture => matches!(os, Fixture),
    }
}

/// Why a ProviderSwitch cannot be the device of a Switch's ports (its
/// `spec.provider`): an os that configures no port. One rule for the Switch, its
/// SwitchPorts and `patchbay validate`.
pub fn port_device_role(spec: &ProviderSwitchSpec) -> Result<(), &'static str> {
    match spec.os {
        DeviceOs::Linux => Err(
            "is os linux, a neighbour source that configures no port: name it in \
             spec.neighbors.providers",
        ),
        DeviceOs::Frr => {
            Err("is os frr, a BGP speaker that configures no port: name it in spec.bgp.speaker")
        }
        _ => Ok(()),
    }
}

pub(super) fn known_hosts_line(line: &str) -> Result<(), ValueError> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if line.starts_with('@') {
        return Err(ValueError(
            "markers such as @cert-authority or @revoked are not supported".into(),
        ));
    }
    let is_key_type =
        |s: &str| s.starts_with("ssh-") || s.starts_with("ecdsa-sha2-") || s.starts_with("sk-");
    let key_at = match fields.as_slice() {
        [t, _, ..] if is_key_type(t) => 1,
        [_, t, _, ..] if is_key_type(t) => 2,
        _ => {
            return Err(ValueError(
                "expected `[host] key-type base64-key`, e.g. `switch1 ssh-ed25519 AAAA…`".into(),
            ));
        }
    };
    let key = fields[key_at];
    if key.len() < 16
        || !key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'=')
    {
        return Err(ValueError("the key is not base64".into()));
    }
    if line.chars().any(|c| c.is_control() && c != '\t') {
        return Err(ValueError("contains control characters".into()));
    }
    Ok(())
}

pub(super) fn fingerprint(fp: &str) -> Result<(), ValueError> {
    let body = fp.strip_prefix("SHA256:").ok_or_else(|| {
        ValueError("must start with SHA256: (as printed by ssh-keygen -lf)".into())
    })?;
    let body = body.strip_suffix('=').unwrap_or(body);
    if body.len() != 43
        || !body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
    {
        return Err(ValueError(
            "must be SHA256: followed by 43 base64 characters".into(),
        ));
    }
    Ok(())
}

/// Validates a ProviderSwitch: backend and OS fit, address and port, credentials for
/// backends that log in, host-key pin grammar, backend options.
pub fn validate_provider(spec: &ProviderSwitchSpec) -> Result<(), ValidationErrors> {
    let mut errors = Errors::default();
    if !backend_supports(spec.backend, spec.os) {
        errors.push(
            "spec.os",
            format!(
                "os {} cannot be driven by backend {}",
                json_word(&spec.os),
                json_word(&spec.backend)
            ),
        );
    }
    errors.check("spec.address", DeviceAddress::parse(&spec.address));
    if let Some(p) = spec.port
        && !(1..=65535).contains(&p)
    {
        errors.push("spec.port", format!("{p} is not a TCP port (1-65535)"));
    }
    let logs_in = matches!(
        spec.backend,
        Backend::Ssh | Backend::Netconf | Backend::Ansible
    );
    match &spec.credentials_secret_ref {
        None if logs_in => errors.push(
            "spec.credentialsSecretRef",
            format!(
                "backend {} logs in to the device and needs a credentials Secret",
                json_word(&spec.backend)
            ),
        ),
        None => {}
        Some(r) => {
            object_name(&mut errors, "spec.credentialsSecretRef.name", &r.name);
            optional_namespace(
                &mut errors,
                "spec.credentialsSecretRef.namespace",
                r.namespace.as_ref(),
            );
        }
    }
    if let Some(pin) = &spec.host_key {
        match (&pin.fingerprint, &pin.known_hosts_line) {
            (Some(_), Some(_)) => errors.push(
                "spec.hostKey",
                "give either fingerprint or knownHostsLine, not both",
            ),
            (None, None) => errors.push(
                "spec.hostKey",
                "give a fingerprint or a knownHostsLine (or leave hostKey out and put \
                 knownHosts in the Secret)",
            ),
            (Some(fp), None) => {
                errors.check("spec.hostKey.fingerprint", fingerprint(fp));
            }
            (None, Some(line)) => {
                errors.check("spec.hostKey.knownHostsLine", known_hosts_line(line));
            }
        }
        if spec.insecure_accept_any_host_key {
            errors.push(
                "spec.insecureAcceptAnyHostKey",
                "cannot be true while hostKey pins a key; remove one of them",
            );
        }
    }
    if let Some(opts) = &spec.options {
        if let Some(t) = opts.connect_timeout_seconds
            && !(1..=300).contains(&t)
        {
            errors.push(
                "spec.options.connectTimeoutSeconds",
                format!("{t} is outside 1-300"),
            );
        }
        if let Some(t) = opts.command_timeout_seconds
            && !(1..=600).contains(&t)
        {
            errors.push(
                "spec.options.commandTimeoutSeconds",
                format!("{t} is outside 1-600"),
            );
        }
        if let Some(n) = opts.max_sessions
            && !(1..=16).contains(&n)
        {
            errors.push("spec.options.maxSessions", format!("{n} is outside 1-16"));
        }
        if let Some(r) = opts.read_sessions {
            let max = opts.max_sessions.unwrap_or(1);
            if !(0..=15).contains(&r) {
                errors.push("spec.options.readSessions", format!("{r} is outside 0-15"));
            } else if r > 0 && r >= max {
                errors.push(
                    "spec.options.readSessions",
                    format!(
                        "{r} of maxSessions {max} leaves the operator no session to configure \
                         the device (set maxSessions to at least {})",
                        r + 1
                    ),
                );
            }
        }
        match (&opts.bridge, spec.backend) {
            (Some(b), Backend::Ovsdb) => {
                errors.check("spec.options.bridge", BridgeName::parse(b));
            }
            (Some(_), _) => {
                errors.push("spec.options.bridge", "only the ovsdb backend has bridges")
            }
            (None, _) => {}
        }
        if let Some(m) = &opts.model {
            let os = json_word(&spec.os);
            if spec.backend != Backend::Netconf {
                errors.push(
                    "spec.options.model",
                    "only the netconf backend has device models",
                );
            } else if !patchbay_model::catalogue::netconf_model_exists(&os, Some(m)) {
                errors.push(
                    "spec.options.model",
                    format!(
                        "no NETCONF model {:?} for os {os}; models: {}",
                        excerpt(m),
                        patchbay_model::catalogue::netconf_model_names().join(", ")
                    ),
                );
            }
        }
        if let Some(dir) = &opts.playbooks {
            if spec.backend != Backend::Ansible {
                errors.push(
                    "spec.options.playbooks",
                    "only the ansible backend runs playbooks",
                );
            } else if !dir.starts_with('/')
                || dir.split('/').any(|c| c == "..")
                || !dir
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'_' | b'-'))
            {
                errors.push(
                    "spec.options.playbooks",
                    format!(
                        "{:?} is not an absolute directory path (letters, digits, '/', '.', '_', '-'; no '..')",
                        excerpt(dir)
                    ),
                );
            }
        }
        // A socket path, where this provider has that socket (else why not).
        let mut socket = |field: &str, path: &Option<String>, applies: bool, why: &str| match path {
            Some(_) if !applies => errors.push(field, why),
            Some(p) => {
                errors.check(
                    field,
                    patchbay_model::values::LldpSocket::parse(p).map_err(ValueError),
                );
            }
            None => {}
        };
        socket(
            "spec.options.controlSocket",
            &opts.control_socket,
            spec.backend == Backend::Ovsdb,
            "only the ovsdb backend has ovs-vswitchd's control socket",
        );
        socket(
            "spec.options.lldpSocket",
            &opts.lldp_socket,
            spec.os == DeviceOs::Linux,
            "only os linux is read through lldpd's socket",
        );
        if let Some(target) = &opts.openflow {
            if spec.backend != Backend::Ovsdb {
                errors.push(
                    "spec.options.openflow",
                    "only the ovsdb backend uses OpenFlow",
                );
            } else if let Err(e) = openflow_target(target) {
                errors.push("spec.options.openflow", e);
            }
        }
    }
    if spec.backend == Backend::Ovsdb
        && spec
            .options
            .as_ref()
            .and_then(|o| o.bridge.as_ref())
            .is_none()
    {
        errors.push(
            "spec.options.bridge",
            "backend ovsdb needs the bridge the ports live on",
        );
    }
    errors.finish(|| ())
}

/// Checks an OpenFlow target: `unix:/absolute/path` or `tcp:HOST:PORT`.
pub(super) fn openflow_target(t: &str) -> Result<(), String> {
    if let Some(path) = t.strip_prefix("unix:") {
        let ok = path.starts_with('/')
            && path.len() < 255
            && !path.split('/').any(|c| c == "..")
            && path
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'_' | b'-'));
        return if ok {
            Ok(())
        } else {
            Err(format!(
                "{:?} is not an absolute socket path (letters, digits, '/', '.', '_', '-'; no '..')",
                excerpt(path)
            ))
        };
    }
    if let Some(rest) = t.strip_prefix("tcp:") {
        let (host, port) = rest.rsplit_once(':').ok_or("tcp: needs HOST:PORT")?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        DeviceAddress::parse(host).map_err(|e| e.0)?;
        return match port.parse::<u16>() {
            Ok(p) if p > 0 => Ok(()),
            _ => Err(format!("{:?} is not a TCP port (1-65535)", excerpt(port))),
        };
    }
    Err(format!(
        "{:?} is neither unix:/PATH nor tcp:HOST:PORT",
        excerpt(t)
    ))
}
