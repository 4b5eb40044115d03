//! The process's settings, read from the environment once, at the first call that needs
//! them (`bsp_begin`, `bsp_nprocs`, `bsp_init`, `bw_init`), and shared by the BSP,
//! point-to-point and collective parts of the library.

use std::sync::OnceLock;

use bulkwire_config::Settings;

static SETTINGS: OnceLock<Result<Settings, String>> = OnceLock::new();

/// The settings, or why they cannot be used (a bad variable, named). Warnings are
/// printed once per job, by the process that is or becomes rank 0.
pub fn get() -> Result<&'static Settings, &'static str> {
    SETTINGS
        .get_or_init(|| {
            let s = Settings::from_env().map_err(|e| e.to_string())?;
            if !s.launch.is_spawned() {
                for w in &s.warnings {
                    bulkwire_bsp::say(&format!("bulkwire: warning: {w}"));
                }
            }
            Ok(s)
        })
        .as_ref()
        .map_err(String::as_str)
}

/// The settings, or the process ends with the reason, prefixed by `call`.
pub fn or_exit(call: &str) -> &'static Settings {
    match get() {
        Ok(s) => s,
        Err(e) => {
            bulkwire_bsp::say(&format!("{call}: {e}"));
            std::process::exit(1)
        }
    }
}
