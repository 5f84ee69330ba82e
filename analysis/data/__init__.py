"""Data in: runs and curves from MLflow or CSV (`load`), model families and what their C, N and
D count (`families`, `compute_factor`), repeated data (`epochs`), synthetic runs (`synthetic`)."""
