/* placeholder, replaced by the permit module */
