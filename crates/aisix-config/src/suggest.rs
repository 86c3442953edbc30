//! "Did you mean …?": the known name closest to a misspelt one, by Levenshtein distance
//! (`strsim`). Where a suggestion is offered is left to the loaders.

/// The candidate closest to `name`, if it is at most `max_distance` edits away; ties go to the
/// candidate that sorts first.
pub(crate) fn closest<'k>(
    name: &str,
    candidates: impl IntoIterator<Item = &'k str>,
    max_distance: usize,
) -> Option<&'k str> {
    candidates
        .into_iter()
        .map(|candidate| (strsim::levenshtein(name, candidate), candidate))
        .filter(|(distance, _)| *distance <= max_distance)
        .min()
        .map(|(_, candidate)| candidate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_candidate_within_the_limit_wins() {
        let known = ["timeout", "model_name", "provider"];
        assert_eq!(closest("timout", known, 2), Some("timeout"));
        assert_eq!(closest("provder", known, 1), Some("provider"));
        assert_eq!(closest("model", known, 2), None);
    }

    #[test]
    fn ties_go_to_the_first_in_sort_order() {
        assert_eq!(closest("ab", ["ac", "aa"], 1), Some("aa"));
    }
}
