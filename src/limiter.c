/* placeholder, replaced by the limiter module */
