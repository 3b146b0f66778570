//! What a link's parameters are at any instant: step changes and outage windows, each
//! optionally repeating with a period.
//!
//! All times here are nanoseconds from the origin; lookups are binary searches over the few
//! change points a scenario gives, so they cost nothing per packet worth mentioning and never
//! allocate.

/// The parameters of a link direction that step changes may alter, in internal units.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Params {
    /// Serialisation rate in bits per nanosecond (Mbit/s / 1000); unused for trace links.
    pub bits_per_ns: f64,
    /// One-way propagation delay, ns.
    pub delay_ns: f64,
    /// Jitter scale, ns (standard deviation for normal jitter, half-width for uniform).
    pub jitter_ns: f64,
    /// Random loss probability.
    pub loss: f64,
}

/// Piecewise-constant parameters: `base` until the first change point, then the snapshot of
/// the latest change point at or before the instant. With a period, the change points repeat
/// every period and a later loop starts from the state the previous loop ended in.
#[derive(Clone, Debug)]
pub(crate) struct Timeline {
    base: Params,
    points: Vec<(u64, Params)>,
    period_ns: Option<u64>,
}

impl Timeline {
    /// `points` must be sorted by time (each snapshot already has every earlier change
    /// applied) and, with a period, lie below it.
    pub fn new(base: Params, points: Vec<(u64, Params)>, period_ns: Option<u64>) -> Self {
        Timeline {
            base,
            points,
            period_ns: period_ns.filter(|&p| p > 0),
        }
    }

    /// The parameters in force at `t`.
    pub fn at(&self, t: u64) -> &Params {
        let Some(last) = self.points.last() else {
            return &self.base;
        };
        let (offset, later_loop) = match self.period_ns {
            Some(p) => (t % p, t >= p),
            None => (t, false),
        };
        let i = self.points.partition_point(|(at, _)| *at <= offset);
        if i > 0 {
            &self.points[i - 1].1
        } else if later_loop {
            &last.1
        } else {
            &self.base
        }
    }

    /// The first change point strictly after `t`, or `u64::MAX` when there is none.
    pub fn next_change_after(&self, t: u64) -> u64 {
        let Some(first) = self.points.first() else {
            return u64::MAX;
        };
        match self.period_ns {
            None => {
                let i = self.points.partition_point(|(at, _)| *at <= t);
                self.points.get(i).map_or(u64::MAX, |(at, _)| *at)
            }
            Some(p) => {
                let loop_start = t - t % p;
                let i = self.points.partition_point(|(at, _)| *at <= t % p);
                match self.points.get(i) {
                    Some((at, _)) => loop_start.saturating_add(*at),
                    None => loop_start.saturating_add(p).saturating_add(first.0),
                }
            }
        }
    }
}

/// Windows `[start, end)` during which the link is down, optionally repeating.
#[derive(Clone, Debug)]
pub(crate) struct Outages {
    windows: Vec<(u64, u64)>,
    period_ns: Option<u64>,
}

impl Outages {
    /// `windows` must be sorted, non-overlapping and, with a period, end at or before it.
    pub fn new(windows: Vec<(u64, u64)>, period_ns: Option<u64>) -> Self {
        Outages {
            windows,
            period_ns: period_ns.filter(|&p| p > 0),
        }
    }

    /// The end of the outage window containing `t`, if the link is down at `t`.
    pub fn down_until(&self, t: u64) -> Option<u64> {
        if self.windows.is_empty() {
            return None;
        }
        let (loop_start, offset) = match self.period_ns {
            Some(p) => (t - t % p, t % p),
            None => (0, t),
        };
        let i = self.windows.partition_point(|(start, _)| *start <= offset);
        let (_, end) = *self.windows.get(i.checked_sub(1)?)?;
        (offset < end).then_some(loop_start.saturating_add(end))
    }

    /// The start of the first outage window beginning at or after `t`, or `u64::MAX`.
    pub fn next_start_at_or_after(&self, t: u64) -> u64 {
        let Some(first) = self.windows.first() else {
            return u64::MAX;
        };
        match self.period_ns {
            None => {
                let i = self.windows.partition_point(|(start, _)| *start < t);
                self.windows.get(i).map_or(u64::MAX, |(start, _)| *start)
            }
            Some(p) => {
                let loop_start = t - t % p;
                let i = self.windows.partition_point(|(start, _)| *start < t % p);
                match self.windows.get(i) {
                    Some((start, _)) => loop_start.saturating_add(*start),
                    None => loop_start.saturating_add(p).saturating_add(first.0),
                }
            }
        }
    }

    /// Whether the link is down at any instant of `[from, until)`.
    pub fn overlaps(&self, from: u64, until: u64) -> bool {
        self.down_until(from).is_some() || self.next_start_at_or_after(from) < until
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(loss: f64) -> Params {
        Params {
            bits_per_ns: 0.01,
            delay_ns: 0.0,
            jitter_ns: 0.0,
            loss,
        }
    }

    #[test]
    fn periodic_timeline_carries_the_last_state_into_the_next_loop() {
        let t = Timeline::new(p(0.0), vec![(5, p(0.5)), (8, p(0.8))], Some(10));
        assert_eq!(t.at(0).loss, 0.0);
        assert_eq!(t.at(5).loss, 0.5);
        assert_eq!(t.at(9).loss, 0.8);
        assert_eq!(t.at(12).loss, 0.8);
        assert_eq!(t.at(15).loss, 0.5);
        assert_eq!(t.next_change_after(8), 15);
        assert_eq!(t.next_change_after(15), 18);
        let once = Timeline::new(p(0.0), vec![(5, p(0.5))], None);
        assert_eq!(once.at(1_000).loss, 0.5);
        assert_eq!(once.next_change_after(5), u64::MAX);
    }

    #[test]
    fn outage_windows_are_half_open_and_repeat() {
        let o = Outages::new(vec![(20, 40)], Some(40));
        assert_eq!(o.down_until(19), None);
        assert_eq!(o.down_until(20), Some(40));
        assert_eq!(o.down_until(40), None);
        assert_eq!(o.down_until(65), Some(80));
        assert_eq!(o.next_start_at_or_after(21), 60);
        assert!(o.overlaps(10, 21));
        assert!(!o.overlaps(40, 60));
    }
}
