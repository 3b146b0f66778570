//! EdAR's state (§IV-B): the connection state `M_t = (a_{t−1}, b_t, I_t)` and, per path, the last
//! k + 1 = 6 time intervals of average RTT, RTO, throughput, congestion window, loss rate and
//! packets in flight (`E_t^i`, k = 5 as in §VI). Everything is fixed-size so that building a
//! state, and sending a transition to the learner, never allocates.
//!
//! Values are normalised to O(1) before they reach the network (the paper does not say how it
//! scales its inputs; these scales are braid's choice): RTT in units of 100 ms, RTO in units of
//! 1 s, throughput in units of 10 Mbit/s, window and in-flight in units of 100 packets of 1200
//! bytes, loss rate × 10 (capped at 10), the receive window as a fraction of the configured
//! receive buffer (capped at 4).

/// Paths EdAR's state describes (the paper's subflows, "usually ≤ 3", §V-C); paths with a higher
/// id are still used by the transmission modes but are not part of the state.
pub const EDAR_MAX_PATHS: usize = 4;
/// Features per path and interval: RTT, RTO, throughput, cwnd, loss rate, in-flight.
pub const FEATURES: usize = 6;
/// Intervals of history per feature: k + 1 with k = 5 (§VI).
pub const HISTORY: usize = 6;
/// Connection features: previous action, receive window, packets in flight.
pub const CONNECTION_FEATURES: usize = 3;

/// Bytes per "packet" in the window and in-flight features.
const PACKET_BYTES: f32 = 1200.0;

/// One observation of the whole connection at a decision (`s_t`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EdarState {
    /// `M_t`: previous action (0 normal, 1 redundant), receive window, packets in flight.
    pub connection: [f32; CONNECTION_FEATURES],
    /// `E_t^i` for the first `path_count` entries: feature-major, oldest interval first
    /// (`paths[i][feature * HISTORY + step]`, step `HISTORY − 1` is the newest).
    pub paths: [[f32; FEATURES * HISTORY]; EDAR_MAX_PATHS],
    /// How many entries of `paths` are in use (0..=EDAR_MAX_PATHS), in path-id order.
    pub path_count: u8,
}

impl EdarState {
    /// A state with no paths and zero connection features.
    pub const EMPTY: EdarState = EdarState {
        connection: [0.0; CONNECTION_FEATURES],
        paths: [[0.0; FEATURES * HISTORY]; EDAR_MAX_PATHS],
        path_count: 0,
    };

    /// The in-use path entries.
    pub fn used_paths(&self) -> &[[f32; FEATURES * HISTORY]] {
        &self.paths[..usize::from(self.path_count).min(EDAR_MAX_PATHS)]
    }

    /// One value: `feature` of path entry `path` at history `step` (0 oldest).
    pub fn value(&self, path: usize, feature: usize, step: usize) -> f32 {
        self.paths[path][feature * HISTORY + step]
    }
}

/// The averages of one path over one time interval, in raw units.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PathSample {
    /// Average smoothed RTT, µs.
    pub rtt_us: f64,
    /// Average retransmission timeout (srtt + 4 rttvar, RFC 6298), µs.
    pub rto_us: f64,
    /// Acknowledged bytes per second.
    pub throughput_bps: f64,
    /// Average congestion window, bytes.
    pub cwnd_bytes: f64,
    /// Average loss rate, 0..=1.
    pub loss_rate: f64,
    /// Average bytes in flight.
    pub in_flight_bytes: f64,
}

impl PathSample {
    /// The six features as the network sees them (see the module docs for the scales).
    pub fn normalised(&self) -> [f32; FEATURES] {
        [
            (self.rtt_us / 100_000.0) as f32,
            (self.rto_us / 1_000_000.0) as f32,
            (self.throughput_bps * 8.0 / 10e6) as f32,
            (self.cwnd_bytes as f32 / PACKET_BYTES) / 100.0,
            ((self.loss_rate * 10.0) as f32).clamp(0.0, 10.0),
            (self.in_flight_bytes as f32 / PACKET_BYTES) / 100.0,
        ]
    }
}

/// The connection features: previous action, receive window left (bytes) as a fraction of the
/// receive buffer, and bytes in flight on all paths.
pub fn connection_features(
    previous_redundant: bool,
    receive_window: u64,
    receive_buffer: f64,
    in_flight_bytes: u64,
) -> [f32; CONNECTION_FEATURES] {
    let window = if receive_buffer > 0.0 {
        (receive_window as f64 / receive_buffer).clamp(0.0, 4.0) as f32
    } else {
        0.0
    };
    [
        if previous_redundant { 1.0 } else { 0.0 },
        window,
        (in_flight_bytes as f32 / PACKET_BYTES) / 100.0,
    ]
}

/// The last [`HISTORY`] samples of one path, oldest first; zero before the path has history.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PathHistory {
    samples: [[f32; FEATURES]; HISTORY],
}

impl PathHistory {
    /// Appends the newest interval, dropping the oldest.
    pub fn push(&mut self, sample: [f32; FEATURES]) {
        // A fixed-size shift (a few vector moves; `rotate_left` is a generic, slower routine).
        for step in 0..HISTORY - 1 {
            self.samples[step] = self.samples[step + 1];
        }
        self.samples[HISTORY - 1] = sample;
    }

    /// The newest sample.
    pub fn newest(&self) -> &[f32; FEATURES] {
        &self.samples[HISTORY - 1]
    }

    /// Forgets everything (a path that left or failed and came back starts afresh).
    pub fn clear(&mut self) {
        *self = PathHistory::default();
    }

    /// Writes the history feature-major (`out[feature * HISTORY + step]`).
    pub fn write_into(&self, out: &mut [f32; FEATURES * HISTORY]) {
        for (step, sample) in self.samples.iter().enumerate() {
            for (feature, &v) in sample.iter().enumerate() {
                out[feature * HISTORY + step] = v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_keeps_the_last_six_oldest_first() {
        let mut h = PathHistory::default();
        for i in 0..8 {
            h.push([i as f32, 10.0 + i as f32, 0.0, 0.0, 0.0, 0.0]);
        }
        let mut out = [0.0; FEATURES * HISTORY];
        h.write_into(&mut out);
        // Intervals 2..=7 remain; step 0 is the oldest.
        assert_eq!(&out[..HISTORY], &[2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
        assert_eq!(out[HISTORY], 12.0);
        assert_eq!(out[2 * HISTORY - 1], 17.0);
        h.clear();
        h.write_into(&mut out);
        assert!(out.iter().all(|&v| v == 0.0));
    }

    #[test]
    fn features_are_normalised() {
        let s = PathSample {
            rtt_us: 50_000.0,
            rto_us: 250_000.0,
            throughput_bps: 1.25e6,
            cwnd_bytes: 120_000.0,
            loss_rate: 0.01,
            in_flight_bytes: 60_000.0,
        };
        let f = s.normalised();
        let expected = [0.5, 0.25, 1.0, 1.0, 0.1, 0.5];
        for (a, b) in f.iter().zip(expected) {
            assert!((a - b).abs() < 1e-6, "{f:?}");
        }
        let c = connection_features(true, 65_536, 131_072.0, 120_000);
        assert_eq!(c, [1.0, 0.5, 1.0]);
        assert_eq!(
            connection_features(false, u64::MAX, 0.0, 0),
            [0.0, 0.0, 0.0]
        );
        // A 100 % loss rate is capped.
        let lossy = PathSample {
            loss_rate: 5.0,
            ..PathSample::default()
        };
        assert_eq!(lossy.normalised()[4], 10.0);
    }
}
