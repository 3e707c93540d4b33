//! kube adapter of the install engine's [`crate::install::NodePort`].
