//! `sluice policy check` and `sluice policy explain`, and the approvers `run` uses.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;

use clap::Subcommand;
use sluice::kernel::access::Pattern;
use sluice::kernel::authorize::{ApprovalFuture, ApprovalOutcome, ApprovalRequest, Approver};
use sluice::kernel::builtin::KvStore;
use sluice::kernel::model::EffectKind;
use sluice::policy::{PolicyDocument, PolicyEngine, PolicyError};

use super::common::load_tools;
use super::failure::Failure;
use super::output::TextOrJson;

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Validate a policy document (JSON, or TOML by extension): every problem with its JSON
    /// pointer. Exit 1 when it has any.
    Check {
        /// The policy document.
        file: PathBuf,
    },
    /// Explain the decision for one access: the access's decision, each rule and whether it
    /// applied, the tool's mode, and the final decision.
    Explain {
        /// The policy document.
        #[arg(long)]
        policy: PathBuf,
        /// The tenant.
        #[arg(long)]
        tenant: String,
        /// The tool id (its manifest, when registered, gives its mode).
        #[arg(long)]
        tool: String,
        /// The effect kind.
        #[arg(long)]
        effect: String,
        /// The resource (a pattern; `*` for any).
        #[arg(long)]
        resource: String,
        /// Manifests, to find the tool (repeatable).
        #[arg(long = "tools", num_args = 1.., action = clap::ArgAction::Append)]
        tools: Vec<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value = "text")]
        format: TextOrJson,
    },
}

/// Loads a policy: unreadable is exit 2, invalid is exit 1.
pub(crate) fn load(path: &Path) -> anyhow::Result<PolicyEngine> {
    match PolicyEngine::from_path(path) {
        Ok(e) => Ok(e),
        Err(e @ PolicyError::Unreadable { .. }) => Err(super::failure::unreadable(&e)),
        Err(e) => Err(super::failure::invalid(e.to_string())),
    }
}

pub(crate) fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Check { file } => match PolicyDocument::from_path(&file) {
            Ok(doc) => {
                let rules: usize = doc.tenants.values().map(|t| t.rules.len()).sum();
                outln!(
                    "{}: valid ({} tenant(s), {rules} rule(s))",
                    file.display(),
                    doc.tenants.len()
                );
                Ok(ExitCode::SUCCESS)
            }
            Err(PolicyError::Invalid { problems }) => {
                outln!("{}: INVALID", file.display());
                for p in problems {
                    outln!("  error {p}");
                }
                Ok(ExitCode::from(1))
            }
            Err(e) => {
                load(&file)?;
                Err(super::failure::invalid(e.to_string()))
            }
        },
        Command::Explain {
            policy,
            tenant,
            tool,
            effect,
            resource,
            tools,
            format,
        } => {
            let engine = load(&policy)?;
            let kind = EffectKind::parse(&effect).ok_or_else(|| Failure {
                code: 2,
                message: format!("`{effect}` is not an effect kind"),
            })?;
            let resource = Pattern::parse(&resource).map_err(|e| Failure {
                code: 2,
                message: format!("the resource `{resource}` {e}"),
            })?;
            let registry = load_tools(&tools, None, KvStore::new())?;
            let read_only = registry
                .get(&tool)
                .is_some_and(|t| t.access_plan().is_read_only());
            let x = engine.explain(&tenant, &tool, read_only, kind, &resource);
            match format {
                TextOrJson::Json => outln!("{}", serde_json::to_string_pretty(&x)?),
                TextOrJson::Text => {
                    outln!("{}: {} by {}", tenant, x.decision, x.by);
                    if !x.known_tenant {
                        outln!("  the tenant is not in the policy: everything is denied");
                    }
                    outln!(
                        "  access {effect} {resource}: {} by {}",
                        x.access.decision,
                        x.access.by
                    );
                    for r in &x.rules {
                        let state = if r.applies {
                            "applies"
                        } else if r.filters_match {
                            "filters match, resource does not"
                        } else {
                            "filters do not match"
                        };
                        outln!("    rule {:<20} {:<5}  {state}", r.id, r.decision.as_str());
                    }
                    outln!(
                        "  mode of `{tool}`: {} ({})",
                        x.mode,
                        if read_only {
                            "read-only"
                        } else {
                            "not read-only"
                        }
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `--approve prompt`: asks y/n on the terminal, one ask at a time, showing the tool, its input
/// and its accesses. No terminal, or anything but `y`, is a rejection.
#[derive(Debug, Default)]
pub(crate) struct PromptApprover {
    one_at_a_time: std::sync::Arc<Mutex<()>>,
}

impl Approver for PromptApprover {
    fn approve(&self, request: ApprovalRequest) -> ApprovalFuture {
        let lock = self.one_at_a_time.clone();
        Box::pin(async move {
            let asked = tokio::task::spawn_blocking(move || -> Result<ApprovalOutcome, String> {
                let _turn = lock.lock().map_err(|_| "the prompt lock is poisoned".to_string())?;
                let tty = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open("/dev/tty")
                    .map_err(|e| format!("no terminal to ask on: {e}"))?;
                let mut out = tty.try_clone().map_err(|e| e.to_string())?;
                let accesses: Vec<String> = request
                    .accesses
                    .iter()
                    .map(|a| format!("{} {}", a.kind, a.resource))
                    .collect();
                let _ = writeln!(
                    out,
                    "\nsluice: call `{}` of `{}` for tenant `{}` asks for approval ({})\n  input: {}\n  accesses: {}\napprove? [y/N] ",
                    request.call_id,
                    request.tool,
                    request.tenant,
                    request.authorization.by,
                    request.input,
                    accesses.join(", ")
                );
                let mut line = String::new();
                std::io::BufReader::new(tty)
                    .read_line(&mut line)
                    .map_err(|e| e.to_string())?;
                Ok(if line.trim().eq_ignore_ascii_case("y") || line.trim().eq_ignore_ascii_case("yes") {
                    ApprovalOutcome::Approved { by: "terminal".into() }
                } else {
                    ApprovalOutcome::Rejected {
                        by: "terminal".into(),
                        reason: "the person at the terminal said no".into(),
                    }
                })
            })
            .await
            .map_err(|e| e.to_string())
            .and_then(|asked| asked);
            asked.map_err(|why| sluice::kernel::Error::ApproverFailed { why })
        })
    }
}
