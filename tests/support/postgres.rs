//! A PostgreSQL server for the tests, started on loopback in a temporary data directory from
//! the machine's Debian package (`.ci/run` installs it: `apt-get install postgresql`). Without the
//! server binaries the test fails saying so: never a silent skip.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// A running server; stopped (immediately) and its directory removed when dropped.
pub struct Postgres {
    pub url: String,
    pub port: u16,
    data: PathBuf,
    bin: PathBuf,
    as_postgres: bool,
}

/// The directory of `initdb` and `pg_ctl`: the newest /usr/lib/postgresql/N/bin.
fn bin_dir() -> PathBuf {
    let mut dirs: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.filter_map(|e| {
                let e = e.ok()?;
                let v = e.file_name().to_str()?.parse::<u32>().ok()?;
                let bin = e.path().join("bin");
                bin.join("initdb").exists().then_some((v, bin))
            })
            .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs.pop().map(|(_, b)| b).unwrap_or_else(|| {
        panic!(
            "PostgreSQL's server binaries are not installed (no /usr/lib/postgresql/N/bin/initdb): \
             `apt-get install postgresql` (.ci/run does)"
        )
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Postgres {
    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        if self.as_postgres {
            // initdb and postgres refuse to run as root: run them as the package's user.
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    /// Initializes a cluster in a new temporary directory and starts it on a free loopback
    /// port; the database `postgres`, user `sluice`, trusted on loopback.
    pub fn start() -> Postgres {
        let bin = bin_dir();
        let as_postgres = is_root();
        let data = std::env::temp_dir().join(format!(
            "sluice-pg-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&data).unwrap();
        let port = free_port();
        let pg = Postgres {
            url: format!("postgres://sluice@127.0.0.1:{port}/postgres"),
            port,
            data,
            bin,
            as_postgres,
        };
        if as_postgres {
            let ok = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&pg.data)
                .status()
                .unwrap()
                .success();
            assert!(ok, "chown of the data directory to postgres failed");
        }
        let cluster = pg.data.join("cluster");
        let out = pg
            .command("initdb")
            .arg("-D")
            .arg(&cluster)
            .args(["-A", "trust", "-U", "sluice", "-E", "UTF8", "--no-sync"])
            .output()
            .expect("initdb runs");
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        pg.start_again();
        pg
    }

    /// Starts the server (again) on its port, with its data.
    pub fn start_again(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
            self.port,
            self.data.display()
        );
        let out = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data.join("cluster"))
            .arg("-l")
            .arg(self.data.join("server.log"))
            .args(["-o", &options, "-w", "start"])
            .output()
            .expect("pg_ctl runs");
        assert!(
            out.status.success(),
            "the PostgreSQL server did not start: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(self.data.join("server.log")).unwrap_or_default()
        );
    }

    /// Stops the server at once (as a crash would: no clean shutdown of the sessions).
    pub fn stop(&self) {
        let out = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data.join("cluster"))
            .args(["-m", "immediate", "-w", "stop"])
            .output()
            .expect("pg_ctl runs");
        assert!(
            out.status.success(),
            "the server did not stop: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Ends every other client's connection (as a network fault or an operator would); returns
    /// how many.
    pub fn terminate_backends(&self) -> usize {
        self.sql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'",
        )
        .trim()
        .parse()
        .unwrap()
    }

    pub fn data(&self) -> &Path {
        &self.data
    }

    /// Runs SQL with `psql` (unaligned, tuples only) and returns what it printed; panics with
    /// psql's error when it fails.
    pub fn sql(&self, sql: &str) -> String {
        let out = self.try_sql(sql);
        out.unwrap_or_else(|e| panic!("psql failed on `{sql}`: {e}"))
    }

    /// Runs SQL with `psql`: what it printed, or its error.
    pub fn try_sql(&self, sql: &str) -> Result<String, String> {
        let out = Command::new(self.bin.join("psql"))
            .args([
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
            ])
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "sluice",
                "-d",
                "postgres",
                "-c",
                sql,
            ])
            .output()
            .expect("psql runs");
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data.join("cluster"))
            .args(["-m", "immediate", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.data);
    }
}
