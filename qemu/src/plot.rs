//! SVG line charts of the paper reproductions (plotters' SVG backend): one chart per figure,
//! each series a line with its points marked, so a figure is read beside the paper's.

use std::path::Path;

use plotters::prelude::*;

/// One line of a chart.
pub struct Series<'a> {
    pub name: &'a str,
    pub points: Vec<(f64, f64)>,
    /// Drawn dashed-looking (points only, no line): values quoted from the paper.
    pub points_only: bool,
}

/// A chart with a base-2 logarithmic x axis (message sizes) or a linear one.
pub struct Chart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub log2_x: bool,
    pub series: Vec<Series<'a>>,
}

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

impl Chart<'_> {
    /// Writes the chart to `path` as SVG.
    pub fn write(&self, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
        Self::write_panels(std::slice::from_ref(self), path)
    }

    /// Writes `charts` to `path` as one SVG, one panel above the other.
    pub fn write_panels(charts: &[Chart], path: &Path) -> Result<(), Box<dyn std::error::Error>> {
        let root =
            SVGBackend::new(path, (800, 500 * charts.len().max(1) as u32)).into_drawing_area();
        root.fill(&WHITE)?;
        let panels = root.split_evenly((charts.len().max(1), 1));
        for (chart, area) in charts.iter().zip(panels.iter()) {
            chart.draw(area)?;
        }
        root.present()?;
        Ok(())
    }

    fn draw(
        &self,
        root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    ) -> Result<(), Box<dyn std::error::Error>> {
        let tx = |x: f64| if self.log2_x { x.max(1e-9).log2() } else { x };
        let all = self.series.iter().flat_map(|s| s.points.iter());
        let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 0.0f64);
        for &(x, y) in all {
            x0 = x0.min(tx(x));
            x1 = x1.max(tx(x));
            y1 = y1.max(y);
        }
        if x0 >= x1 {
            x1 = x0 + 1.0;
        }
        let mut chart = ChartBuilder::on(root)
            .caption(self.title, ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(x0..x1, 0.0..y1 * 1.1 + 1e-9)?;
        let log2 = self.log2_x;
        chart
            .configure_mesh()
            .x_desc(self.x_label)
            .y_desc(self.y_label)
            .x_label_formatter(&|v| {
                if log2 {
                    format!("{:.0}", 2f64.powf(*v))
                } else {
                    format!("{v:.2}")
                }
            })
            .draw()?;
        for (i, s) in self.series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let pts: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (tx(x), y)).collect();
            let marks = PointSeries::of_element(pts.clone(), 4, color.filled(), &|c, s, st| {
                EmptyElement::at(c) + Circle::new((0, 0), s, st)
            });
            if s.points_only {
                chart
                    .draw_series(marks)?
                    .label(s.name)
                    .legend(move |(x, y)| Circle::new((x + 10, y), 4, color.filled()));
            } else {
                chart
                    .draw_series(LineSeries::new(pts, color.stroke_width(2)))?
                    .label(s.name)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                    });
                chart.draw_series(marks)?;
            }
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()?;
        Ok(())
    }
}
