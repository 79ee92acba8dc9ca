/* placeholder, replaced by the sem module */
