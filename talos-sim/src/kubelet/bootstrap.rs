//! TLS bootstrap, as a real kubelet does it: authenticate with the bootstrap
//! token of the machine config, ask for a client certificate with a
//! CertificateSigningRequest (`kubernetes.io/kube-apiserver-client-kubelet`),
//! wait until kube-controller-manager approved and signed it, then act as
//! `system:node:<name>` with that certificate. A token the cluster does not
//! accept (wrong, expired, deleted) fails with 401 here, as on a real node.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::{Client, Config};
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, PKCS_ECDSA_P256_SHA256};
use serde_json::json;

use super::KubeletError;
use crate::machine_config::{NodeConfig, Sensitive};

pub const SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const USAGES: [&str; 2] = ["digital signature", "client auth"];
/// How often the CSR is read while waiting for its certificate.
const CSR_POLL: Duration = Duration::from_millis(250);

/// Where the cluster is and how to trust it, from the machine config.
#[derive(Debug, Clone)]
pub struct ClusterAccess {
    pub endpoint: String,
    /// `cluster.ca.crt` as in the config: base64 of the PEM, which is also
    /// what a kubeconfig's `certificate-authority-data` holds.
    ca_b64: String,
}

impl ClusterAccess {
    pub fn from_config(cfg: &NodeConfig) -> Result<Self, KubeletError> {
        let ca_b64 = cfg
            .cluster_ca_crt
            .clone()
            .ok_or_else(|| KubeletError::Credentials("cluster.ca.crt is not set".into()))?;
        let pem = B64
            .decode(ca_b64.trim())
            .map_err(|e| KubeletError::Credentials(format!("cluster.ca.crt is not base64: {e}")))?;
        if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
            return Err(KubeletError::Credentials(
                "cluster.ca.crt does not hold a PEM certificate".into(),
            ));
        }
        Ok(Self {
            endpoint: cfg.control_plane_endpoint.clone(),
            ca_b64: ca_b64.trim().to_string(),
        })
    }
}

/// The kubelet's client key and certificate (what a real kubelet keeps in
/// `kubelet-client-current.pem`). Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    pub cert_pem: String,
    key_pem: Sensitive,
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &self.key_pem)
            .finish()
    }
}

const KEY_MARKER: &str = "-----BEGIN PRIVATE KEY-----";

impl ClientIdentity {
    /// Certificate then key, the layout of the kubelet's PEM file.
    pub fn to_pem(&self) -> String {
        let mut pem = self.cert_pem.clone();
        if !pem.ends_with('\n') {
            pem.push('\n');
        }
        pem.push_str(self.key_pem.expose());
        pem
    }

    pub fn from_pem(pem: &str) -> Option<Self> {
        let at = pem.find(KEY_MARKER)?;
        let (cert, key) = pem.split_at(at);
        cert.contains("-----BEGIN CERTIFICATE-----").then(|| Self {
            cert_pem: cert.to_string(),
            key_pem: Sensitive::new(key),
        })
    }
}

/// A node's key pair and its CSR (PEM): subject `CN=system:node:<name>,
/// O=system:nodes`, no SANs, ECDSA P-256 like current kubelets.
pub fn csr_pem(node_name: &str) -> Result<(KeyPair, String), KubeletError> {
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
        .map_err(|e| KubeletError::Bootstrap(format!("generating the key: {e}")))?;
    let mut params = CertificateParams::default();
    let mut subject = DistinguishedName::new();
    subject.push(DnType::OrganizationName, "system:nodes");
    subject.push(DnType::CommonName, format!("system:node:{node_name}"));
    params.distinguished_name = subject;
    let pem = params
        .serialize_request(&key)
        .and_then(|csr| csr.pem())
        .map_err(|e| KubeletError::Bootstrap(format!("building the CSR: {e}")))?;
    Ok((key, pem))
}

/// The CertificateSigningRequest object for `csr_pem`.
pub fn csr_object(csr_pem: &str) -> CertificateSigningRequest {
    CertificateSigningRequest {
        metadata: ObjectMeta {
            generate_name: Some("csr-".into()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(csr_pem.as_bytes().to_vec()),
            signer_name: SIGNER.into(),
            usages: Some(USAGES.iter().map(|u| u.to_string()).collect()),
            ..Default::default()
        },
        status: None,
    }
}

/// What became of a CSR: still pending, signed, or refused.
#[derive(Debug, PartialEq, Eq)]
pub enum CsrState {
    Pending,
    Issued(String),
    Refused(String),
}

pub fn csr_state(csr: &CertificateSigningRequest) -> CsrState {
    let status = csr.status.clone().unwrap_or_default();
    for c in status.conditions.iter().flatten() {
        if (c.type_ == "Denied" || c.type_ == "Failed") && c.status == "True" {
            let why = c.message.clone().or(c.reason.clone()).unwrap_or_default();
            return CsrState::Refused(format!("{}: {why}", c.type_));
        }
    }
    match status.certificate {
        Some(ByteString(bytes)) if !bytes.is_empty() => {
            CsrState::Issued(String::from_utf8_lossy(&bytes).into_owned())
        }
        _ => CsrState::Pending,
    }
}

async fn client(access: &ClusterAccess, user: serde_json::Value) -> Result<Client, KubeletError> {
    crate::install_crypto_provider();
    let kubeconfig: kube::config::Kubeconfig = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": "cluster", "cluster": {
            "server": access.endpoint,
            "certificate-authority-data": access.ca_b64,
        }}],
        "users": [{ "name": "kubelet", "user": user }],
        "contexts": [{ "name": "kubelet", "context": { "cluster": "cluster", "user": "kubelet" }}],
        "current-context": "kubelet",
    }))
    .map_err(|e| KubeletError::Credentials(format!("building the kubeconfig: {e}")))?;
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| KubeletError::Credentials(e.to_string()))?;
    // A real kubelet gives up on a silent API server rather than hanging.
    config.connect_timeout = Some(Duration::from_secs(10));
    Client::try_from(config).map_err(|e| KubeletError::Credentials(e.to_string()))
}

/// A client authenticated with the bootstrap token.
pub async fn token_client(
    access: &ClusterAccess,
    token: &Sensitive,
) -> Result<Client, KubeletError> {
    client(access, json!({ "token": token.expose() })).await
}

/// A client authenticated as the node, with its certificate.
pub async fn node_client(
    access: &ClusterAccess,
    identity: &ClientIdentity,
) -> Result<Client, KubeletError> {
    client(
        access,
        json!({
            "client-certificate-data": B64.encode(&identity.cert_pem),
            "client-key-data": B64.encode(identity.key_pem.expose()),
        }),
    )
    .await
}

/// Obtains the node's client certificate with the bootstrap token; gives
/// up (to be retried) when no certificate came within `wait`.
pub async fn bootstrap(
    access: &ClusterAccess,
    token: &Sensitive,
    node_name: &str,
    wait: Duration,
) -> Result<ClientIdentity, KubeletError> {
    let client = token_client(access, token).await?;
    let (key, pem) = csr_pem(node_name)?;
    let csrs: Api<CertificateSigningRequest> = Api::all(client);
    let created = csrs
        .create(&PostParams::default(), &csr_object(&pem))
        .await
        .map_err(KubeletError::from_bootstrap)?;
    let name = created.metadata.name.clone().unwrap_or_default();
    tracing::info!(node = %node_name, csr = %name, "kubelet requested its client certificate");
    let deadline = tokio::time::Instant::now() + wait;
    let mut csr = created;
    loop {
        match csr_state(&csr) {
            CsrState::Issued(cert_pem) => {
                tracing::info!(node = %node_name, csr = %name, "kubelet client certificate issued");
                return Ok(ClientIdentity {
                    cert_pem,
                    key_pem: Sensitive::new(key.serialize_pem()),
                });
            }
            CsrState::Refused(why) => {
                return Err(KubeletError::Bootstrap(format!("CSR {name} {why}")));
            }
            CsrState::Pending => {}
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(KubeletError::Bootstrap(format!(
                "CSR {name} not signed within {} s",
                wait.as_secs()
            )));
        }
        tokio::time::sleep(CSR_POLL).await;
        csr = csrs
            .get(&name)
            .await
            .map_err(KubeletError::from_bootstrap)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequestCondition, CertificateSigningRequestStatus,
    };

    #[test]
    fn csr_names_the_node_and_nothing_else() {
        let (key, pem) = csr_pem("default-abcde").unwrap();
        let parsed = rcgen::CertificateSigningRequestParams::from_pem(&pem).unwrap();
        let subject: Vec<(String, String)> = parsed
            .params
            .distinguished_name
            .iter()
            .map(|(t, v)| {
                let v = match v {
                    rcgen::DnValue::Utf8String(s) => s.clone(),
                    rcgen::DnValue::PrintableString(s) => s.as_str().to_string(),
                    other => format!("{other:?}"),
                };
                (format!("{t:?}"), v)
            })
            .collect();
        assert_eq!(
            subject,
            vec![
                ("OrganizationName".into(), "system:nodes".into()),
                ("CommonName".into(), "system:node:default-abcde".into()),
            ]
        );
        assert!(parsed.params.subject_alt_names.is_empty());
        // The CSR carries the key we keep.
        use rcgen::PublicKeyData;
        assert_eq!(parsed.public_key.der_bytes(), key.der_bytes());
        assert_eq!(
            key.algorithm(),
            &PKCS_ECDSA_P256_SHA256,
            "P-256 like a current kubelet"
        );
    }

    #[test]
    fn csr_object_asks_the_kubelet_client_signer() {
        let obj = csr_object("PEM");
        assert_eq!(obj.metadata.generate_name.as_deref(), Some("csr-"));
        assert_eq!(obj.spec.signer_name, SIGNER);
        assert_eq!(
            obj.spec.usages,
            Some(vec!["digital signature".into(), "client auth".into()])
        );
        let json = serde_json::to_value(&obj).unwrap();
        // `request` travels as base64 of the PEM.
        assert_eq!(json["spec"]["request"], B64.encode("PEM"));
    }

    fn with_status(
        certificate: Option<&str>,
        condition: Option<(&str, &str)>,
    ) -> CertificateSigningRequest {
        let mut csr = csr_object("PEM");
        csr.status = Some(CertificateSigningRequestStatus {
            certificate: certificate.map(|c| ByteString(c.as_bytes().to_vec())),
            conditions: condition.map(|(t, s)| {
                vec![CertificateSigningRequestCondition {
                    type_: t.into(),
                    status: s.into(),
                    message: Some("because".into()),
                    ..Default::default()
                }]
            }),
        });
        csr
    }

    #[test]
    fn csr_states() {
        assert_eq!(csr_state(&csr_object("PEM")), CsrState::Pending);
        // Approved but not signed yet: still waiting.
        assert_eq!(
            csr_state(&with_status(None, Some(("Approved", "True")))),
            CsrState::Pending
        );
        assert_eq!(
            csr_state(&with_status(Some("CERT"), Some(("Approved", "True")))),
            CsrState::Issued("CERT".into())
        );
        assert_eq!(
            csr_state(&with_status(None, Some(("Denied", "True")))),
            CsrState::Refused("Denied: because".into())
        );
        assert_eq!(
            csr_state(&with_status(None, Some(("Failed", "True")))),
            CsrState::Refused("Failed: because".into())
        );
    }

    #[test]
    fn identities_round_trip_through_their_pem_file_and_never_print_the_key() {
        let id = ClientIdentity {
            cert_pem: "-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----\n".into(),
            key_pem: Sensitive::new(format!(
                "{KEY_MARKER}\nSECRETKEY\n-----END PRIVATE KEY-----\n"
            )),
        };
        assert_eq!(ClientIdentity::from_pem(&id.to_pem()), Some(id.clone()));
        assert!(!format!("{id:?}").contains("SECRETKEY"));
        assert_eq!(ClientIdentity::from_pem("garbage"), None);
    }

    #[test]
    fn cluster_access_needs_a_pem_ca() {
        let mut cfg = NodeConfig {
            control_plane_endpoint: "https://127.0.0.1:6443".into(),
            ..Default::default()
        };
        assert!(ClusterAccess::from_config(&cfg).is_err());
        cfg.cluster_ca_crt = Some("not base64!".into());
        assert!(ClusterAccess::from_config(&cfg).is_err());
        cfg.cluster_ca_crt = Some(B64.encode("hello"));
        assert!(ClusterAccess::from_config(&cfg).is_err());
        let pem = "-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----\n";
        cfg.cluster_ca_crt = Some(B64.encode(pem));
        let access = ClusterAccess::from_config(&cfg).unwrap();
        assert_eq!(access.endpoint, "https://127.0.0.1:6443");
    }
}
