//! The kube adapter of the provider's `NodeClasses` port: NodeClasses from the
//! reconciler's cache, Secrets read from the API server when Create needs them.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Secret as KubeSecret;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client};

use super::conditions::{Readiness, readiness_at};
use super::{ScalewayElasticMetalNodeClass, SecretKeyRef};
use crate::install::Secret;
use crate::provider::{NodeClassRecord, NodeClasses};

/// The bytes under `r.key` of the referenced Secret: `Ok(None)` when the
/// Secret is absent or the key is missing or empty.
pub async fn read_secret_key(
    client: &Client,
    r: &SecretKeyRef,
) -> Result<Option<Vec<u8>>, kube::Error> {
    let secrets: Api<KubeSecret> = Api::namespaced(client.clone(), &r.namespace);
    let Some(secret) = secrets.get_opt(&r.name).await? else {
        return Ok(None);
    };
    Ok(secret
        .data
        .and_then(|mut d| d.remove(&r.key))
        .map(|b| b.0)
        .filter(|b| !b.is_empty()))
}

pub struct KubeNodeClasses {
    store: Store<ScalewayElasticMetalNodeClass>,
    client: Client,
}

impl KubeNodeClasses {
    pub fn new(store: Store<ScalewayElasticMetalNodeClass>, client: Client) -> Self {
        KubeNodeClasses { store, client }
    }
}

fn record(name: &str, nc: &ScalewayElasticMetalNodeClass) -> NodeClassRecord {
    NodeClassRecord {
        name: name.to_string(),
        spec: nc.spec.clone(),
        readiness: nc.status.as_ref().map_or(Readiness::Unknown, |s| {
            readiness_at(&s.conditions, nc.metadata.generation)
        }),
        private_networks: nc
            .status
            .as_ref()
            .map(|s| s.private_networks.clone())
            .unwrap_or_default(),
    }
}

#[async_trait]
impl NodeClasses for KubeNodeClasses {
    fn get(&self, name: &str) -> Option<NodeClassRecord> {
        let nc = self.store.get(&ObjectRef::new(name))?;
        Some(record(name, &nc))
    }

    async fn get_live(&self, name: &str) -> Result<Option<NodeClassRecord>, String> {
        Api::<ScalewayElasticMetalNodeClass>::all(self.client.clone())
            .get_opt(name)
            .await
            .map(|nc| nc.as_ref().map(|nc| record(name, nc)))
            .map_err(|e| e.to_string())
    }

    fn list(&self) -> Vec<NodeClassRecord> {
        self.store
            .state()
            .iter()
            .filter_map(|nc| nc.metadata.name.as_deref())
            .filter_map(|name| self.get(name))
            .collect()
    }

    async fn secret(&self, r: &SecretKeyRef) -> Result<Option<Secret>, String> {
        let bytes = read_secret_key(&self.client, r)
            .await
            .map_err(|e| e.to_string())?;
        bytes
            .map(|b| {
                String::from_utf8(b).map(Secret::new).map_err(|_| {
                    format!(
                        "Secret {}/{} key {:?} is not UTF-8",
                        r.namespace, r.name, r.key
                    )
                })
            })
            .transpose()
    }
}
