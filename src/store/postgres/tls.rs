//! TLS to the server, as the URL's `sslmode` asks (libpq's meanings):
//! rustls (ring) through `tokio-postgres-rustls`.
//!
//! | `sslmode`         | encrypted             | certificate checked          |
//! |-------------------|-----------------------|------------------------------|
//! | `disable`         | no                    | —                            |
//! | `allow`, `prefer` | when the server can   | no                           |
//! | `require`         | yes                   | no (chain, if a root is set) |
//! | `verify-ca`       | yes                   | chain against the roots      |
//! | `verify-full`     | yes                   | chain, and names the host    |
//!
//! Roots: `sslrootcert=FILE` (PEM), `sslrootcert=system` (the Mozilla roots
//! bundled through `webpki-roots`), else `~/.postgresql/root.crt` when it
//! exists, else the Mozilla roots.

use super::location::{PgLocation, Tls};
use crate::error::{Error, Result};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use std::path::PathBuf;
use std::sync::Arc;
use tokio_postgres_rustls::MakeRustlsConnect;

/// The connector for a location: `None` for `sslmode=disable`.
///
/// # Errors
/// STORE_IO when the root certificate file cannot be read or holds no
/// certificate.
pub fn connector(loc: &PgLocation) -> Result<Option<MakeRustlsConnect>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier: Arc<dyn ServerCertVerifier> = match loc.tls {
        Tls::Disable => return Ok(None),
        Tls::Prefer | Tls::Require => Arc::new(Unchecked(provider.clone())),
        Tls::VerifyCa | Tls::VerifyFull => {
            let roots = roots(loc.root_cert.as_deref())?;
            let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                .build()
                .map_err(|e| tls_setup(format!("cannot build the certificate check: {e}")))?;
            if loc.tls == Tls::VerifyCa {
                Arc::new(ChainOnly(webpki))
            } else {
                webpki
            }
        }
    };
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_setup(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(Some(MakeRustlsConnect::new(config)))
}

fn tls_setup(why: String) -> Error {
    Error::StoreIo {
        context: format!("TLS setup for the PostgreSQL connection failed: {why}"),
    }
}

fn roots(root_cert: Option<&str>) -> Result<Arc<RootCertStore>> {
    let mozilla = || RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let file = match root_cert {
        Some("system") => return Ok(Arc::new(mozilla())),
        Some(path) => PathBuf::from(path),
        None => {
            match std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".postgresql/root.crt")) {
                Some(p) if p.exists() => p,
                _ => return Ok(Arc::new(mozilla())),
            }
        }
    };
    let shown = file.display().to_string();
    let certs = CertificateDer::pem_file_iter(&file)
        .map_err(|e| {
            tls_setup(format!(
                "cannot read the root certificate file {shown}: {e}"
            ))
        })?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| tls_setup(format!("the root certificate file {shown} is not PEM: {e}")))?;
    let mut store = RootCertStore::empty();
    let (added, _ignored) = store.add_parsable_certificates(certs);
    if added == 0 {
        return Err(tls_setup(format!(
            "the root certificate file {shown} holds no usable certificate"
        )));
    }
    Ok(Arc::new(store))
}

/// `prefer` and `require`: the handshake's signatures are checked (the
/// channel is encrypted to whoever holds the key), the certificate is not.
#[derive(Debug)]
struct Unchecked(Arc<CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain must lead to a trusted root; the name in the
/// certificate may differ from the host.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
