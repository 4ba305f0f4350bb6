//! Every decision patchbay makes, apart from the I/O that acts on it. Each module
//! here is pure: it takes what was read (objects, facts, the time) and returns what
//! to do; no client, no device, no clock, no lock, no task. Each is table-tested
//! with plain values and no API server (the way linkerd2's policy-controller keeps
//! its `core`). The rooms that do I/O (`controllers`, `worker`, `lease`, `backends`,
//! `serve`, `webhook`) call these and carry out the answers.
//!
//! The line is kept by Cargo, not by habit: this crate (`patchbay-core`) cannot
//! name the operator's rooms, tokio or a kube client — they are not among its
//! dependencies — and `core/clippy.toml` refuses the clock and locks
//! (`tests/layout.rs` holds the dependency list and the clippy list in place).
//!
//! | module | decides |
//! |---|---|
//! | [`state_machine`] | a port's next step (`decide`), its backoff |
//! | [`phases`] | where a host is in its life, what each of its ports must carry, the Metal3 gate |
//! | [`allocation`] | which Servers a claim gets (`plan`) |
//! | [`tenancy`] | which namespace may carry which VLAN where (VLANPool grants), which configurations a tenant may name |
//! | [`admission`] | what the webhook answers for one object, by the same rules |
//! | [`validate`] | whether an object is valid (field paths and reasons); a configuration as a device-level port |
//! | [`inventory`] | a claim's `hosts.ini` and `hosts.yaml` |
//! | [`conditions`] | a condition set by Kubernetes conventions; the status merge patch; an Event's type and note |
//! | [`status`] | facts → status and conditions (ports, Switches, providers; claims, Servers and host conditions in `status/hosts.rs`) |
//! | [`failure`] | what can go wrong: one type, a bounded category, its retry class |
//! | [`port_index`] | which SwitchPorts each Switch has (kept from the watch's events) |
//! | [`port_move`] | whether a port whose entry names another device port moves, and what it cleans |
//! | [`own_writes`] | which port events are only the echo of this process's own write |
//! | [`lease`] | what a replica does with the Lease it sees |
//! | [`reachability`] | whether a switch answers: the worker's down/probe/up transitions |
//! | [`lobby`] | when a link-aggregation group's held changes go as one batch |
//! | [`slack`] | when a bookkeeping map gives back the table a burst grew |
//! | [`reconcile_queue`] | which SwitchPort reconciles next: woken once, one run per port, a timer only for a retry |
//! | [`retry`] | one retry policy: each failure's class, when it is looked at again, one budget for failures that last |
//! | [`device_types`] | which backend drives a Metal3 BareMetalSwitch's networking-generic-switch device type, or why none (data: `device_types.yaml`) |
//! | [`cabling`] | whether a NIC is plugged where its host says (from what its port sees), and what happens to the port |
//! | [`neighbors`] | what a Switch's status says its ports see (LLDP, MACs), when a read is written |
//! | [`bgp`] | BGP to allocated hosts: grants, what a claim may announce, each host's peers, a ToR's neighbours |
//! | [`bgp_nodes`] | which Kubernetes Nodes and MetalLB `BGPPeer`s carry a Server's peers (opt-in) |
//! | [`plan`] | what one SwitchPort must carry on its device; what a change does to the fleet's ports before it is applied (`patchbay plan`) |
//! | [`blast_radius`] | where the webhook looks for the ports an edit moves, and the warning `kubectl apply` shows for them |

pub mod admission;
pub mod allocation;
pub mod bgp;
pub mod bgp_nodes;
pub mod blast_radius;
pub mod cabling;
pub mod conditions;
pub mod device_types;
pub mod failure;
pub mod inventory;
pub mod lease;
pub mod lobby;
pub mod metal3_host;
pub mod metal3_switch;
pub mod neighbors;
pub mod own_writes;
pub mod phases;
pub mod plan;
pub mod port_index;
pub mod port_move;
pub mod reachability;
pub mod reconcile_queue;
pub mod retry;
pub mod rollout;
pub mod slack;
pub mod state_machine;
pub mod status;
pub mod tenancy;
pub mod validate;
