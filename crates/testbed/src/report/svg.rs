//! A minimal SVG line chart: axes with ticks, one polyline per series, a legend.

use std::fmt::Write as _;

/// One named line of points `(x, y)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// The points, in drawing order.
    pub points: Vec<(f64, f64)>,
}

const WIDTH: f64 = 800.0;
const HEIGHT: f64 = 450.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
/// Points drawn per series at most (longer series are thinned evenly).
const MAX_POINTS: usize = 1000;
const COLOURS: [&str; 12] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#000000", "#aec7e8",
];

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A round tick step giving about five ticks over `span`.
fn tick_step(span: f64) -> f64 {
    if span <= 0.0 || !span.is_finite() {
        return 1.0;
    }
    let raw = span / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let residual = raw / magnitude;
    let nice = if residual < 1.5 {
        1.0
    } else if residual < 3.5 {
        2.0
    } else if residual < 7.5 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

/// Renders the series as an SVG document.
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let finite = |p: &&(f64, f64)| p.0.is_finite() && p.1.is_finite();
    let all = || series.iter().flat_map(|s| s.points.iter()).filter(finite);
    let x_max = all().map(|p| p.0).fold(0.0, f64::max).max(1e-9);
    let x_min = all().map(|p| p.0).fold(x_max, f64::min).min(0.0);
    let y_max = all().map(|p| p.1).fold(0.0, f64::max).max(1e-9) * 1.05;
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let sx = |x: f64| LEFT + (x - x_min) / (x_max - x_min) * plot_w;
    let sy = |y: f64| TOP + plot_h - y / y_max * plot_h;
    let mut out = String::new();
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n",
        LEFT + plot_w / 2.0,
        escape(title)
    );
    let _ = writeln!(
        out,
        "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{plot_w}\" height=\"{plot_h}\" fill=\"none\" stroke=\"#444\"/>"
    );
    for (step, horizontal) in [(tick_step(x_max - x_min), true), (tick_step(y_max), false)] {
        let (lo, hi) = if horizontal {
            (x_min, x_max)
        } else {
            (0.0, y_max)
        };
        let mut v = (lo / step).ceil() * step;
        let mut n = 0;
        while v <= hi + step * 1e-9 && n < 50 {
            let label = if step >= 1.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.3}")
            };
            if horizontal {
                let x = sx(v);
                let _ = writeln!(
                    out,
                    "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{TOP}\" stroke=\"#ddd\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{label}</text>",
                    TOP + plot_h,
                    TOP + plot_h + 16.0
                );
            } else {
                let y = sy(v);
                let _ = writeln!(
                    out,
                    "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>",
                    LEFT + plot_w,
                    LEFT - 6.0,
                    y + 4.0
                );
            }
            v += step;
            n += 1;
        }
    }
    let _ = writeln!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
        LEFT + plot_w / 2.0,
        HEIGHT - 12.0,
        escape(x_label)
    );
    let _ = writeln!(
        out,
        "<text x=\"16\" y=\"{:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {:.1})\">{}</text>",
        TOP + plot_h / 2.0,
        TOP + plot_h / 2.0,
        escape(y_label)
    );
    for (i, s) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let stride = s.points.len().div_ceil(MAX_POINTS).max(1);
        let mut path = String::new();
        for p in s.points.iter().step_by(stride).filter(finite) {
            let _ = write!(path, "{:.1},{:.1} ", sx(p.0), sy(p.1));
        }
        let _ = writeln!(
            out,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{}\"/>",
            path.trim_end()
        );
        let ly = TOP + 14.0 + 18.0 * i as f64;
        let lx = WIDTH - RIGHT + 12.0;
        let _ = writeln!(
            out,
            "<line x1=\"{lx}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" stroke=\"{colour}\" stroke-width=\"3\"/><text x=\"{}\" y=\"{}\">{}</text>",
            lx + 20.0,
            lx + 26.0,
            ly + 4.0,
            escape(&s.name)
        );
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_has_one_polyline_per_series_and_escapes_text() {
        let s = [
            Series {
                name: "a<b".into(),
                points: vec![(0.0, 1.0), (1.0, 2.0)],
            },
            Series {
                name: "c".into(),
                points: vec![(0.0, f64::NAN), (2.0, 3.0)],
            },
        ];
        let svg = line_chart("t&t", "x", "y", &s);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("a&lt;b") && svg.contains("t&amp;t"));
        assert!(!svg.contains("NaN"));
        assert_eq!(tick_step(10.0), 2.0);
        assert_eq!(tick_step(0.3), 0.05);
    }
}
