//! Berth's integration tests, one binary: real Berth, agent, plugin and etcd
//! processes on real sockets (see each module for what it covers).

mod agents;
mod cluster_tls;
mod csi_operations;
mod docker;
mod etcd_servers;
mod etcd_store;
mod events;
mod hardening;
mod hostile_input;
mod lifecycle;
mod metrics;
mod node_paths;
mod operability;
mod partitions;
mod plugin_check;
mod plugin_probe;
mod policy_cli;
mod policy_compat;
mod policy_engine;
mod policy_go;
mod policy_js;
mod policy_oci;
mod policy_python;
mod policy_rollout;
mod policy_set;
mod registry;
mod registry_credentials;
mod reliability;
mod sample_plugin;
mod service_manager;
mod signatures;
mod spec_rules;
mod split_roles;
mod store_compat;
