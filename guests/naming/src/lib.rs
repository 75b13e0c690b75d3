//! Sample naming policy: `<prefix>-<sanitised volume name>-<hash of the volume id>`.
//!
//! Settings: `prefix` (default `pv`), `max-length` (16 to 128, default 128).
//! The hash comes from Berth's volume id, so a volume deleted and created again
//! under the same name gets a new backend name and never meets its old self.

mod policy;

pub use policy::*;

berth_guest::export_naming!(SampleNaming);

#[cfg(test)]
mod tests {
    use super::*;
    use berth_guest::testing::{pairs, volume};
    use berth_guest::*;

    fn name(volume_name: &str, settings: &[(&str, &str)]) -> Result<String, String> {
        SampleNaming::volume_name(NamingRequest {
            volume: volume(volume_name),
            settings: pairs(settings),
        })
    }

    #[test]
    fn prefix_name_and_hash() {
        let n = name("Postgres Data", &[("prefix", "team-a")]).unwrap();
        assert!(n.starts_with("team-a-postgres-data-"), "{n}");
        assert_eq!(n.len(), "team-a-postgres-data-".len() + 8);
        assert_eq!(
            n,
            name("Postgres Data", &[("prefix", "team-a")]).unwrap(),
            "deterministic"
        );
    }

    #[test]
    fn never_longer_than_the_limit() {
        let long = "x".repeat(500);
        assert_eq!(name(&long, &[]).unwrap().len(), 128);
        assert_eq!(name(&long, &[("max-length", "40")]).unwrap().len(), 40);
    }

    #[test]
    fn names_without_usable_characters_still_get_a_name() {
        assert!(name("日本語", &[]).unwrap().starts_with("pv-vol-"));
    }

    #[test]
    fn bad_settings_are_refused_with_the_setting_named() {
        assert!(name("a", &[("prefix", "***")]).unwrap_err().contains("prefix"));
        assert!(
            name("a", &[("max-length", "500")])
                .unwrap_err()
                .contains("max-length")
        );
        assert!(
            name("a", &[("max-length", "ten")])
                .unwrap_err()
                .contains("max-length")
        );
    }
}
