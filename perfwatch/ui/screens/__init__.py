"""perfwatch's screens (modal dialogs and help)."""
