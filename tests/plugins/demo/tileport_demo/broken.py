raise ImportError("this plugin module is broken on purpose (the test of a broken plugin)")
