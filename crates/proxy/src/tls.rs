//! TLS 1.3 for the paths: the server's self-signed certificate (generated on first start and
//! kept in its state directory, key file mode 0600), its SHA-256 fingerprint, and the rustls
//! configurations of both ends. The client either pins the fingerprint ([`PinnedServer`]: the
//! end-entity certificate's SHA-256 must match, and the handshake signatures are still verified
//! with the provider's algorithms) or verifies against a CA file the usual webpki way.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use crate::config::ServerTrust;

/// The ALPN protocol of braid's paths.
pub const ALPN: &[u8] = b"braid/1";

/// Certificate file name in the state directory.
pub const CERT_FILE: &str = "server-cert.der";
/// Private key file name in the state directory (mode 0600).
pub const KEY_FILE: &str = "server-key.der";

/// Something wrong with certificates or keys.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Generating the certificate failed.
    #[error("generating the server certificate: {0}")]
    Generate(String),
    /// A CA file holds no usable certificate.
    #[error("{path}: no usable CA certificate ({reason})")]
    CaFile {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The server's certificate and key.
#[derive(Debug)]
pub struct ServerIdentity {
    /// The DER certificate.
    pub cert: CertificateDer<'static>,
    /// The PKCS#8 key.
    pub key: PrivatePkcs8KeyDer<'static>,
}

impl Clone for ServerIdentity {
    fn clone(&self) -> Self {
        ServerIdentity {
            cert: self.cert.clone(),
            key: self.key.clone_key(),
        }
    }
}

impl ServerIdentity {
    /// A fresh self-signed certificate for `name`, kept in memory only.
    pub fn generate(name: &str) -> Result<ServerIdentity, TlsError> {
        let ck = rcgen::generate_simple_self_signed(vec![name.to_owned()])
            .map_err(|e| TlsError::Generate(e.to_string()))?;
        Ok(ServerIdentity {
            cert: ck.cert.der().clone(),
            key: PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der()),
        })
    }

    /// Loads the certificate and key from `dir`, or generates and stores them on first start
    /// (the directory is created mode 0700, the key written mode 0600).
    pub fn load_or_generate(dir: &Path, name: &str) -> Result<ServerIdentity, TlsError> {
        let cert_path = dir.join(CERT_FILE);
        let key_path = dir.join(KEY_FILE);
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| TlsError::Io { path, source }
        };
        if cert_path.exists() && key_path.exists() {
            let cert = std::fs::read(&cert_path).map_err(io(&cert_path))?;
            let key = std::fs::read(&key_path).map_err(io(&key_path))?;
            return Ok(ServerIdentity {
                cert: CertificateDer::from(cert),
                key: PrivatePkcs8KeyDer::from(key),
            });
        }
        create_private_dir(dir)?;
        let identity = Self::generate(name)?;
        write_file(&key_path, identity.key.secret_pkcs8_der(), 0o600)?;
        write_file(&cert_path, &identity.cert, 0o644)?;
        Ok(identity)
    }

    /// The certificate's SHA-256 fingerprint, hex with colons.
    pub fn fingerprint(&self) -> String {
        fingerprint(&self.cert)
    }
}

/// Creates `dir` (and parents) with mode 0700 if missing.
pub fn create_private_dir(dir: &Path) -> Result<(), TlsError> {
    use std::os::unix::fs::DirBuilderExt as _;
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| TlsError::Io {
            path: dir.to_owned(),
            source,
        })
}

fn write_file(path: &Path, data: &[u8], mode: u32) -> Result<(), TlsError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let io = |source| TlsError::Io {
        path: path.to_owned(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(io)?;
    f.write_all(data).map_err(io)?;
    f.sync_all().map_err(io)
}

/// SHA-256 of `der`, as uppercase hex bytes joined by colons.
pub fn fingerprint(der: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, der);
    let mut out = String::with_capacity(95);
    for (i, b) in digest.as_ref().iter().enumerate() {
        if i > 0 {
            out.push(':');
        }
        out.push_str(&format!("{b:02X}"));
    }
    out
}

/// Compares two byte strings in time that depends only on their lengths.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The server's rustls configuration: TLS 1.3 only, ALPN `braid/1`.
pub fn server_crypto(identity: &ServerIdentity) -> Result<rustls::ServerConfig, TlsError> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(
            vec![identity.cert.clone()],
            PrivateKeyDer::Pkcs8(identity.key.clone_key()),
        )?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(config)
}

/// The server endpoint's configuration: its stateless reset key (RFC 9000 §10.3) and the key of
/// its connection ids, both derived from the server's private key (HMAC-SHA256 of a label), so
/// they are the same after a restart. A client whose connection the server no longer has (it
/// restarted) then sends a connection id the new endpoint recognises as its own and is
/// answered with a stateless reset it can check, and its link reconnects at once, instead of
/// after the connection's idle timeout (15 s) as with quinn's random keys. Only the holder of
/// the private key can derive them.
pub fn server_endpoint_config(identity: &ServerIdentity) -> quinn::EndpointConfig {
    let base = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, identity.key.secret_pkcs8_der());
    let reset = ring::hmac::sign(&base, b"braid stateless reset key v1");
    let reset = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, reset.as_ref());
    let ids = ring::hmac::sign(&base, b"braid connection id key v1");
    let mut id_key = [0u8; 8];
    id_key.copy_from_slice(&ids.as_ref()[..8]);
    let id_key = u64::from_le_bytes(id_key);
    let mut config = quinn::EndpointConfig::new(Arc::new(reset));
    config.cid_generator(move || {
        Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(id_key))
    });
    config
}

/// The metrics endpoint's rustls configuration (HTTPS, `metrics_tls_cert` and
/// `metrics_tls_key`): TLS 1.3 and 1.2, which Prometheus and curl speak, ALPN `http/1.1`.
/// rustls checks that `key` is the private key of the chain's first certificate.
pub fn metrics_crypto(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<rustls::ServerConfig, TlsError> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The client's rustls configuration for `trust`: TLS 1.3 only, ALPN `braid/1`.
pub fn client_crypto(trust: &ServerTrust) -> Result<rustls::ClientConfig, TlsError> {
    let provider = provider();
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?;
    let mut config = match trust {
        ServerTrust::Fingerprint(pin) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(PinnedServer {
                pin: *pin,
                algorithms: provider.signature_verification_algorithms,
            }))
            .with_no_client_auth(),
        ServerTrust::CaFile(path) => {
            let mut roots = rustls::RootCertStore::empty();
            let ca_err = |reason: String| TlsError::CaFile {
                path: path.clone(),
                reason,
            };
            let certs = CertificateDer::pem_file_iter(path).map_err(|e| ca_err(e.to_string()))?;
            for cert in certs {
                let cert = cert.map_err(|e| ca_err(e.to_string()))?;
                roots.add(cert).map_err(|e| ca_err(e.to_string()))?;
            }
            if roots.is_empty() {
                return Err(ca_err("the file holds no certificate".into()));
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
    };
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(config)
}

/// Accepts exactly the server certificate whose SHA-256 is `pin`; handshake signatures are
/// verified as usual.
#[derive(Debug)]
pub struct PinnedServer {
    pin: [u8; 32],
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PinnedServer {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let digest = ring::digest::digest(&ring::digest::SHA256, end_entity);
        if constant_time_eq(digest.as_ref(), &self.pin) {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_is_stored_once_with_a_private_key_file() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("braid-tls-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let a = ServerIdentity::load_or_generate(&dir, "braid").unwrap();
        let b = ServerIdentity::load_or_generate(&dir, "braid").unwrap();
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert_eq!(a.fingerprint().len(), 95);
        let mode = std::fs::metadata(dir.join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn pin_matches_only_its_certificate() {
        let a = ServerIdentity::generate("braid").unwrap();
        let b = ServerIdentity::generate("braid").unwrap();
        let pin = crate::config::client::parse_fingerprint(&a.fingerprint()).unwrap();
        let v = PinnedServer {
            pin,
            algorithms: provider().signature_verification_algorithms,
        };
        let name = ServerName::try_from("braid").unwrap();
        assert!(
            v.verify_server_cert(&a.cert, &[], &name, &[], UnixTime::now())
                .is_ok()
        );
        assert!(
            v.verify_server_cert(&b.cert, &[], &name, &[], UnixTime::now())
                .is_err()
        );
    }
}
