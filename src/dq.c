/* placeholder, replaced by the dq module */
