"""What a result reads as: table cells, an axis's section, the report, the figures."""
