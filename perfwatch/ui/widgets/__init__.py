"""perfwatch's widgets."""
