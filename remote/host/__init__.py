"""What runs on the hosts: python3 >= 3.8, standard library only, nothing installed there.

These modules travel as source in each SSH exec (remote/agents/shipper.py) and are loaded there
as the package `ddph`; they import each other relatively, so the same files also import
here as `ddptui.remote.host` for tests. Keep them free of anything outside the standard library.
"""
