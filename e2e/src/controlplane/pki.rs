//! The certificates of a local control plane: one CA that every component
//! trusts (and that kube-controller-manager signs CSRs with), serving
//! certificates for the three secure ports, client certificates whose subject
//! carries the identity RBAC expects, and the service-account signing key pair.

use std::fs::OpenOptions;
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

/// A certificate and its private key, both PEM.
#[derive(Clone)]
pub struct CertAndKey {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for CertAndKey {
    // Keeps private keys out of logs and panic messages.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertAndKey")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// Where a certificate and its key were written.
#[derive(Debug, Clone)]
pub struct CertPaths {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Identity of a certificate's subject: Kubernetes reads the user from the CN
/// and the groups from the O entries.
struct Subject<'a> {
    common_name: &'a str,
    organizations: &'a [&'a str],
}

#[derive(Debug)]
pub struct Pki {
    pub ca: CertAndKey,
    pub apiserver_serving: CertAndKey,
    /// What kube-apiserver presents to kubelets (logs, exec, port-forward).
    pub apiserver_kubelet_client: CertAndKey,
    pub admin: CertAndKey,
    pub controller_manager: CertAndKey,
    pub controller_manager_serving: CertAndKey,
    pub scheduler: CertAndKey,
    pub scheduler_serving: CertAndKey,
    /// Trusted only for requests proxied by the aggregation layer (and by
    /// delegated authentication in the controller manager and scheduler).
    pub front_proxy_ca: CertAndKey,
    /// What kube-apiserver presents when it proxies to an aggregated API.
    pub front_proxy_client: CertAndKey,
    /// Signs service-account tokens (kube-apiserver) and verifies them.
    pub service_account: CertAndKey,
}

/// Group that RBAC's bootstrap policy binds to cluster-admin.
pub const ADMIN_GROUP: &str = "system:masters";
pub const ADMIN_USER: &str = "kps-e2e-admin";
/// The only CN kube-apiserver accepts request headers from.
pub const FRONT_PROXY_CLIENT: &str = "front-proxy-client";

impl Pki {
    /// `service_ip` is the first address of the service range: in-cluster
    /// clients reach the API server as `kubernetes.default` on that address.
    pub fn generate(service_ip: IpAddr) -> Result<Pki> {
        let (ca, issuer) = certificate_authority("kps-e2e-ca")?;
        // A CA of its own, as kubeadm does: a certificate it signs lets the
        // holder assert any identity through request headers.
        let (front_proxy_ca, front_proxy_issuer) = certificate_authority("kps-e2e-front-proxy-ca")?;

        let loopback = ["127.0.0.1".to_string(), "localhost".to_string()];
        let mut apiserver_names = loopback.to_vec();
        apiserver_names.push(service_ip.to_string());
        apiserver_names.extend(
            [
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ]
            .map(String::from),
        );

        let sa_key = KeyPair::generate().context("generating the service-account key")?;
        Ok(Pki {
            apiserver_serving: serving(&issuer, "kube-apiserver", &apiserver_names)?,
            apiserver_kubelet_client: client(
                &issuer,
                &Subject {
                    common_name: "kube-apiserver-kubelet-client",
                    // Bound to cluster-admin by the bootstrap policy, so a
                    // kubelet's webhook authorization admits it without extra RBAC.
                    organizations: &[ADMIN_GROUP],
                },
            )?,
            admin: client(
                &issuer,
                &Subject {
                    common_name: ADMIN_USER,
                    organizations: &[ADMIN_GROUP],
                },
            )?,
            controller_manager: client(
                &issuer,
                &Subject {
                    common_name: "system:kube-controller-manager",
                    organizations: &[],
                },
            )?,
            controller_manager_serving: serving(&issuer, "kube-controller-manager", &loopback)?,
            scheduler: client(
                &issuer,
                &Subject {
                    common_name: "system:kube-scheduler",
                    organizations: &[],
                },
            )?,
            scheduler_serving: serving(&issuer, "kube-scheduler", &loopback)?,
            service_account: CertAndKey {
                cert_pem: sa_key.public_key_pem(),
                key_pem: sa_key.serialize_pem(),
            },
            front_proxy_client: client(
                &front_proxy_issuer,
                &Subject {
                    common_name: FRONT_PROXY_CLIENT,
                    organizations: &[],
                },
            )?,
            front_proxy_ca,
            ca,
        })
    }
}

fn certificate_authority(common_name: &str) -> Result<(CertAndKey, Issuer<'static, KeyPair>)> {
    let key =
        KeyPair::generate().with_context(|| format!("generating the key of {common_name}"))?;
    let mut params = CertificateParams::default();
    params.distinguished_name = distinguished_name(&Subject {
        common_name,
        organizations: &[],
    });
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = params
        .self_signed(&key)
        .with_context(|| format!("self-signing {common_name}"))?;
    let pair = CertAndKey {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    };
    Ok((pair, Issuer::new(params, key)))
}

fn distinguished_name(subject: &Subject<'_>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, subject.common_name);
    for org in subject.organizations {
        dn.push(DnType::OrganizationName, *org);
    }
    dn
}

fn leaf(
    issuer: &Issuer<'_, KeyPair>,
    subject: &Subject<'_>,
    names: &[String],
    usage: ExtendedKeyUsagePurpose,
) -> Result<CertAndKey> {
    let key = KeyPair::generate()
        .with_context(|| format!("generating the key of {}", subject.common_name))?;
    let mut params = CertificateParams::new(names.to_vec())
        .with_context(|| format!("subject alternative names of {}", subject.common_name))?;
    params.distinguished_name = distinguished_name(subject);
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![usage];
    params.use_authority_key_identifier_extension = true;
    let cert = params
        .signed_by(&key, issuer)
        .with_context(|| format!("signing the certificate of {}", subject.common_name))?;
    Ok(CertAndKey {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

fn serving(
    issuer: &Issuer<'_, KeyPair>,
    common_name: &str,
    names: &[String],
) -> Result<CertAndKey> {
    let subject = Subject {
        common_name,
        organizations: &[],
    };
    leaf(issuer, &subject, names, ExtendedKeyUsagePurpose::ServerAuth)
}

fn client(issuer: &Issuer<'_, KeyPair>, subject: &Subject<'_>) -> Result<CertAndKey> {
    leaf(issuer, subject, &[], ExtendedKeyUsagePurpose::ClientAuth)
}

/// Writes the certificate and (mode 0600) the key to `paths`.
pub fn write_pair(paths: &CertPaths, pair: &CertAndKey) -> Result<()> {
    write_file(&paths.cert, &pair.cert_pem, 0o644)?;
    write_file(&paths.key, &pair.key_pem, 0o600)
}

pub fn write_file(path: &Path, contents: &str, mode: u32) -> Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(contents.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::RootCertStore;
    use rustls::client::WebPkiServerVerifier;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::server::WebPkiClientVerifier;
    use std::sync::Arc;

    fn roots(pki: &Pki) -> Arc<RootCertStore> {
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(pki.ca.cert_pem.as_bytes()).unwrap())
            .unwrap();
        Arc::new(roots)
    }

    fn der(pair: &CertAndKey) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(pair.cert_pem.as_bytes()).unwrap()
    }

    fn provider() -> Arc<rustls::crypto::CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    fn verify_server(pki: &Pki, pair: &CertAndKey, name: &str) -> Result<(), rustls::Error> {
        let verifier = WebPkiServerVerifier::builder_with_provider(roots(pki), provider())
            .build()
            .unwrap();
        let name = ServerName::try_from(name.to_string()).unwrap();
        verifier
            .verify_server_cert(&der(pair), &[], &name, &[], UnixTime::now())
            .map(|_| ())
    }

    fn verify_client(pki: &Pki, pair: &CertAndKey) -> Result<(), rustls::Error> {
        let verifier = WebPkiClientVerifier::builder_with_provider(roots(pki), provider())
            .build()
            .unwrap();
        verifier
            .verify_client_cert(&der(pair), &[], UnixTime::now())
            .map(|_| ())
    }

    #[test]
    fn serving_certificates_chain_to_the_ca_for_their_names() {
        let pki = Pki::generate("10.96.0.1".parse().unwrap()).unwrap();
        for name in [
            "127.0.0.1",
            "localhost",
            "kubernetes.default.svc",
            "10.96.0.1",
        ] {
            verify_server(&pki, &pki.apiserver_serving, name)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        verify_server(&pki, &pki.scheduler_serving, "127.0.0.1").unwrap();
        verify_server(&pki, &pki.controller_manager_serving, "localhost").unwrap();
        assert!(verify_server(&pki, &pki.apiserver_serving, "example.com").is_err());
        assert!(verify_server(&pki, &pki.scheduler_serving, "kubernetes").is_err());
    }

    #[test]
    fn client_certificates_are_for_client_auth_only() {
        let pki = Pki::generate("10.96.0.1".parse().unwrap()).unwrap();
        for pair in [
            &pki.admin,
            &pki.controller_manager,
            &pki.scheduler,
            &pki.apiserver_kubelet_client,
        ] {
            verify_client(&pki, pair).unwrap();
        }
        // A serving certificate must not be usable as a client identity.
        assert!(verify_client(&pki, &pki.apiserver_serving).is_err());
        // Nor a client certificate as a server.
        assert!(verify_server(&pki, &pki.admin, "127.0.0.1").is_err());
    }

    #[test]
    fn the_front_proxy_client_chains_only_to_its_own_ca() {
        let pki = Pki::generate("10.96.0.1".parse().unwrap()).unwrap();
        assert!(verify_client(&pki, &pki.front_proxy_client).is_err());
        let front = Pki {
            ca: pki.front_proxy_ca.clone(),
            ..pki
        };
        verify_client(&front, &front.front_proxy_client).unwrap();
        assert!(verify_client(&front, &front.admin).is_err());
    }

    #[test]
    fn certificates_of_another_ca_are_rejected() {
        let pki = Pki::generate("10.96.0.1".parse().unwrap()).unwrap();
        let other = Pki::generate("10.96.0.1".parse().unwrap()).unwrap();
        assert!(verify_client(&pki, &other.admin).is_err());
        assert!(verify_server(&pki, &other.apiserver_serving, "127.0.0.1").is_err());
    }

    #[test]
    fn keys_are_written_private_and_redacted_from_debug() {
        use std::os::unix::fs::PermissionsExt;
        let pki = Pki::generate("10.96.0.1".parse().unwrap()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let paths = CertPaths {
            cert: dir.path().join("admin.crt"),
            key: dir.path().join("admin.key"),
        };
        write_pair(&paths, &pki.admin).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&paths.key), 0o600);
        assert_eq!(mode(&paths.cert), 0o644);
        assert_eq!(
            std::fs::read_to_string(&paths.key).unwrap(),
            pki.admin.key_pem
        );
        let debug = format!("{pki:?}");
        assert!(
            !debug.contains("PRIVATE KEY"),
            "private key leaked into Debug output"
        );
        assert!(debug.contains("BEGIN CERTIFICATE"));
    }
}
