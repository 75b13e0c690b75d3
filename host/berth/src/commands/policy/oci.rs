//! `berth policy push` and `berth policy pull`: modules in OCI registries,
//! as the WebAssembly artifact the ecosystem shares, by digest.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use serde::Serialize;

use berth::oci::{
    Access, Component, Digest, PASSWORD_VARIABLE, PublicKey, Reference, Registry, SigningKey, Trust, layout,
};

use crate::output::{Output, say};

#[derive(Debug, Args)]
pub struct RegistryArgs {
    /// A PEM file of the CA(s) the registry's certificate is checked against
    /// (default: the system's).
    #[arg(long)]
    pub ca: Option<PathBuf>,
    /// Plain HTTP instead of HTTPS: to a registry on this machine (loopback) only.
    #[arg(long)]
    pub plain_http: bool,
    /// The Docker config file holding registry credentials (`auths`; default:
    /// $DOCKER_CONFIG/config.json, else ~/.docker/config.json).
    #[arg(long)]
    pub docker_config: Option<PathBuf>,
}

impl RegistryArgs {
    pub(super) fn access(&self) -> Access {
        Access {
            ca: self.ca.clone(),
            plain_http: self.plain_http.then_some(true),
            docker_config: self.docker_config.clone(),
        }
    }
}

#[derive(Debug, Args)]
pub struct PushArgs {
    /// The module: a WebAssembly component (.wasm) that loads as a policy.
    pub module: PathBuf,
    /// Where to: oci://HOST[:PORT]/REPOSITORY[:TAG] (without a tag, by digest only).
    pub reference: String,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

#[derive(Debug, Args)]
pub struct PullArgs {
    /// oci://HOST[:PORT]/REPOSITORY:TAG or …@sha256:DIGEST.
    pub reference: String,
    /// A file for the module, or a directory to hold it as an OCI image
    /// layout (an existing directory, or a path ending in /); default: the
    /// repository's last part, .wasm, here. (`--output` is the answer's format.)
    #[arg(long, value_name = "FILE|DIR")]
    pub to: Option<PathBuf>,
    /// Require a signature by this public key (PEM, ECDSA P-256); repeatable.
    #[arg(long = "key")]
    pub keys: Vec<PathBuf>,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

#[derive(Debug, Args)]
pub struct SignArgs {
    /// The module to sign: oci://HOST[:PORT]/REPOSITORY:TAG or …@sha256:DIGEST
    /// (a tag is resolved once to its digest, and that digest is what is
    /// signed and printed); or a module file, signed as `cosign sign-blob`
    /// does into FILE.sig beside it (what `[policy_trust] required = true`
    /// asks of a module given by path).
    pub reference: String,
    /// The signing key, ECDSA P-256: cosign's encrypted key (`cosign.key`, from
    /// `berth policy generate-key` or `cosign generate-key-pair`; its password
    /// in COSIGN_PASSWORD), or an unencrypted PKCS#8 PEM (`openssl genpkey
    /// -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out key.pem`).
    #[arg(long)]
    pub key: PathBuf,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

#[derive(Debug, Args)]
pub struct GenerateKeyArgs {
    /// Written: PREFIX.key (the private key, encrypted, mode 0600) and
    /// PREFIX.pub (the public key, for [policy_trust] keys).
    #[arg(default_value = "cosign")]
    pub prefix: PathBuf,
}

/// A key pair as cosign writes one, the password from COSIGN_PASSWORD: a
/// private key is never written unencrypted, and no file is overwritten.
pub fn generate_key(args: GenerateKeyArgs, output: Output) -> anyhow::Result<ExitCode> {
    let password = std::env::var_os(PASSWORD_VARIABLE).with_context(|| {
        format!(
            "the private key is written encrypted: give its password in {PASSWORD_VARIABLE} (it may be empty)"
        )
    })?;
    let with = |ext: &str| {
        let mut name = args.prefix.clone().into_os_string();
        name.push(format!(".{ext}"));
        PathBuf::from(name)
    };
    let (private_path, public_path) = (with("key"), with("pub"));
    for path in [&private_path, &public_path] {
        anyhow::ensure!(!path.exists(), "{} exists; it is not overwritten", path.display());
    }
    let (private, public) = SigningKey::generate(password.as_encoded_bytes())?;
    write_new(&private_path, &private, 0o600)?;
    write_new(&public_path, &public, 0o644)?;
    #[derive(Serialize)]
    struct Generated {
        private_key: String,
        public_key: String,
    }
    let generated = Generated {
        private_key: private_path.display().to_string(),
        public_key: public_path.display().to_string(),
    };
    match output {
        Output::Json => crate::output::print_json(&generated)?,
        Output::Text => {
            say!("{:<12}{}", "private key", generated.private_key);
            say!("{:<12}{}", "public key", generated.public_key);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A new file with `mode` from its first byte (never a moment readable by others).
fn write_new(path: &Path, text: &str, mode: u32) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .with_context(|| format!("writing {}", path.display()))
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// oci://HOST[:PORT]/REPOSITORY:TAG or …@sha256:DIGEST.
    pub reference: String,
    /// A trusted public key (PEM, ECDSA P-256, as `cosign.pub`); repeatable.
    #[arg(long = "key", required = true)]
    pub keys: Vec<PathBuf>,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

fn trust(keys: &[PathBuf]) -> anyhow::Result<Trust> {
    Ok(Trust {
        keys: keys
            .iter()
            .map(|k| PublicKey::from_pem(k))
            .collect::<Result<_, _>>()?,
        required: !keys.is_empty(),
    })
}

#[derive(Serialize)]
struct Signed {
    reference: String,
    /// What was signed: the manifest's digest, or the file's SHA-256.
    digest: String,
    /// Where the signatures are stored: cosign's tag beside the module.
    signatures: String,
    /// The key that signed (verify).
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<String>,
}

pub async fn sign(args: SignArgs, output: Output) -> anyhow::Result<ExitCode> {
    let password = std::env::var_os(PASSWORD_VARIABLE).map(|p| p.into_encoded_bytes());
    let key = SigningKey::from_pem(&args.key, password.as_deref())?;
    let file = Path::new(&args.reference);
    if !args.reference.starts_with("oci://") {
        // A reference as cosign takes it (no scheme) when no such file is
        // there; said, so that a mistyped file name is not signed remotely
        // unnoticed.
        match Reference::parse(&args.reference) {
            Ok(_) if !file.exists() && args.reference.contains('/') => {
                eprintln!(
                    "berth: no file {}: taking it as the registry reference oci://{}",
                    args.reference, args.reference
                );
            }
            _ => return sign_file(file, &key, output),
        }
    }
    let reference = Reference::parse(&args.reference)?;
    let registry = Registry::new(&reference, &args.registry.access())?;
    let digest = registry.resolve(&reference).await?;
    if let (Some(tag), None) = (&reference.tag, &reference.digest) {
        // A tag names whatever the registry answers now (cosign warns too).
        eprintln!(
            "berth: warning: signing {digest}, what the tag {tag} names at this moment; \
             to sign what you built, sign by digest: {}",
            reference.pinned(digest.clone())
        );
    }
    let tag = registry.sign(&reference, &digest, &key).await?;
    signed(
        &Signed {
            digest: digest.to_string(),
            reference: reference.pinned(digest).to_string(),
            signatures: format!("oci://{}/{}:{tag}", reference.registry, reference.repository),
            key: None,
        },
        output,
    )
}

/// Signs module file `file` into FILE.sig (cosign's `sign-blob` format).
fn sign_file(file: &Path, key: &SigningKey, output: Output) -> anyhow::Result<ExitCode> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let signature = key.sign(&bytes)?;
    let at = berth::oci::blob_signature_path(file);
    layout::write_whole(&at, signature.as_bytes()).with_context(|| format!("writing {}", at.display()))?;
    signed(
        &Signed {
            reference: file.display().to_string(),
            digest: berth::oci::Digest::of(&bytes).to_string(),
            signatures: at.display().to_string(),
            key: None,
        },
        output,
    )
}

pub async fn verify(args: VerifyArgs, output: Output) -> anyhow::Result<ExitCode> {
    let reference = Reference::parse(&args.reference)?;
    let trust = trust(&args.keys)?;
    let registry = Registry::new(&reference, &args.registry.access())?;
    let digest = registry.resolve(&reference).await?;
    let name = reference.to_string();
    let key = registry
        .verify(&name, &reference, &digest, &trust)
        .await?
        .map(|v| v.key.path.display().to_string());
    signed(
        &Signed {
            digest: digest.to_string(),
            reference: reference.pinned(digest.clone()).to_string(),
            signatures: format!(
                "oci://{}/{}:{}",
                reference.registry,
                reference.repository,
                berth::oci::signature::signature_tag(&digest)
            ),
            key,
        },
        output,
    )
}

fn signed(s: &Signed, output: Output) -> anyhow::Result<ExitCode> {
    match output {
        Output::Json => crate::output::print_json(s)?,
        Output::Text => {
            if let Some(k) = &s.key {
                say!("{:<12}{k}", "signed by");
            }
            say!("{:<12}{}", "digest", s.digest);
            say!("{:<12}{}", "signatures", s.signatures);
            say!("{}", s.reference);
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Serialize)]
struct Pinned {
    /// The reference pinned by the manifest's digest: what `[[policy]] module` takes.
    reference: String,
    digest: String,
    /// The digest of the module's bytes (the artifact's one layer).
    layer: String,
    size: usize,
    /// Where it was written (pull).
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<String>,
}

/// What the config says of the component: the policy interfaces it exports, its imports.
fn describe(path: &Path) -> anyhow::Result<Component> {
    let (_, module, _) = crate::commands::policy::load(
        path,
        &crate::commands::policy::LimitArgs::default(),
        Default::default(),
    )
    .with_context(|| format!("{} does not load as a policy module", path.display()))?;
    let version = module.contract().version();
    Ok(Component {
        exports: module
            .decisions()
            .iter()
            .map(|d| format!("berth:policy/{d}@{version}"))
            .collect(),
        imports: module.imports().to_vec(),
        target: None,
    })
}

pub async fn push(args: PushArgs, output: Output) -> anyhow::Result<ExitCode> {
    let reference = Reference::parse_destination(&args.reference)?;
    let bytes = std::fs::read(&args.module).with_context(|| format!("reading {}", args.module.display()))?;
    let component = describe(&args.module)?;
    let registry = Registry::new(&reference, &args.registry.access())?;
    let title = args.module.file_name().and_then(|n| n.to_str());
    let size = bytes.len();
    let layer = Digest::of(&bytes);
    let pinned = registry.push(&reference, bytes.into(), component, title).await?;
    report(
        &Pinned {
            digest: pinned
                .digest
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            reference: pinned.to_string(),
            layer: layer.to_string(),
            size,
            output: None,
        },
        output,
    )
}

pub async fn pull(args: PullArgs, output: Output) -> anyhow::Result<ExitCode> {
    let reference = Reference::parse(&args.reference)?;
    let registry = Registry::new(&reference, &args.registry.access())?;
    let pulled = registry.pull(&reference, berth::oci::MODULE_MAX).await?;
    if !args.keys.is_empty() {
        let digest = pulled
            .reference
            .digest
            .clone()
            .expect("a pulled reference is pinned");
        let trust = trust(&args.keys)?;
        registry
            .verify(&reference.to_string(), &reference, &digest, &trust)
            .await?;
    }
    let default = || {
        PathBuf::from(format!(
            "{}.wasm",
            reference.repository.rsplit('/').next().unwrap_or("module")
        ))
    };
    let target = args.to.clone().unwrap_or_else(default);
    let as_layout = target.is_dir()
        || args
            .to
            .as_ref()
            .is_some_and(|o| o.to_string_lossy().ends_with('/'));
    if as_layout {
        layout::store(&target, &pulled, reference.tag.as_deref())?;
    } else {
        // Checked already; written whole or not at all.
        layout::write_whole(&target, &pulled.module)
            .with_context(|| format!("writing {}", target.display()))?;
    }
    report(
        &Pinned {
            reference: pulled.reference.to_string(),
            digest: pulled
                .reference
                .digest
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            layer: pulled.layer.to_string(),
            size: pulled.module.len(),
            output: Some(target.display().to_string()),
        },
        output,
    )
}

fn report(p: &Pinned, output: Output) -> anyhow::Result<ExitCode> {
    match output {
        Output::Json => crate::output::print_json(p)?,
        Output::Text => {
            if let Some(o) = &p.output {
                say!("{:<10}{o}", "written");
            }
            say!("{:<10}{}", "layer", p.layer);
            say!("{:<10}{} bytes", "size", p.size);
            say!("{}", p.reference);
        }
    }
    Ok(ExitCode::SUCCESS)
}
