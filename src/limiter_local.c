/* placeholder, replaced by the limiter_local module */
